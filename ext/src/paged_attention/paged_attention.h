// paged_attention: attention of queries over K/V stored in fixed-size pages,
// read through a per-request block table.
#pragma once

#include <optional>

#include "mlx/array.h"
#include "mlx/utils.h"

namespace pagecheck {

// query [B, Hq, L, D]; key_pages, value_pages [P, Hkv, page_size, D];
// block_table int32 [B, max_pages] (-1 padded); context_lens int32 [B].
// Returns [B, Hq, L, D] in the query dtype. scale defaults to D ** -0.5. With
// causal, the queries are the last L positions of each context.
mlx::core::array paged_attention(
    const mlx::core::array& query,
    const mlx::core::array& key_pages,
    const mlx::core::array& value_pages,
    const mlx::core::array& block_table,
    const mlx::core::array& context_lens,
    int page_size,
    std::optional<float> scale,
    bool causal,
    mlx::core::StreamOrDevice stream = {});

} // namespace pagecheck
