// dense_attention: grouped-query attention over dense K/V (the unpaged path),
// with the same mask rule as paged_attention. Serves as the dense half of the
// gather + dense ablation and as an oracle for the paged op.
#pragma once

#include <optional>

#include "mlx/array.h"
#include "mlx/utils.h"

namespace pagecheck {

// query [B, Hq, L, D]; key, value [B, Hkv, S, D]; context_lens int32 [B]
// (default S for every request): keys s >= context_lens[b] do not exist.
// Returns [B, Hq, L, D] in the query dtype.
mlx::core::array dense_attention(
    const mlx::core::array& query,
    const mlx::core::array& key,
    const mlx::core::array& value,
    std::optional<float> scale,
    bool causal,
    const std::optional<mlx::core::array>& context_lens,
    mlx::core::StreamOrDevice stream = {});

} // namespace pagecheck
