// qk_norm_rope: the work between a Qwen3 layer's stacked q|k|v projection and
// its attention, in one dispatch: split the projection into heads, RMS-normalise
// and weigh every q and k head, rotate q and k by their positions (rotary
// embedding, non-traditional layout), and lay q, k and v out head-major.
#pragma once

#include <vector>

#include "mlx/array.h"
#include "mlx/utils.h"

namespace pagecheck {

// qkv [B, L, (H_q + 2 H_kv) * D] (q heads, then k heads, then v heads) in
// float32, bfloat16 or float16; q_norm, k_norm [D] in the same dtype;
// offsets int32 [B], the position of each row's first token. Returns
// {q [B, H_q, L, D], k [B, H_kv, L, D], v [B, H_kv, L, D]} in the qkv dtype:
// q and k equal mx.fast.rope(mx.fast.rms_norm(heads, weight, eps), D,
// traditional=false, base=rope_base, scale=1, offset=offsets), v the plain
// heads. The three are row-contiguous views of one buffer, one graph node.
std::vector<mlx::core::array> qk_norm_rope(
    const mlx::core::array& qkv,
    const mlx::core::array& q_norm,
    const mlx::core::array& k_norm,
    const mlx::core::array& offsets,
    int num_q_heads,
    int num_kv_heads,
    float eps,
    float rope_base,
    mlx::core::StreamOrDevice stream = {});

} // namespace pagecheck
