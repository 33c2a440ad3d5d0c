// The CUDA launch of QkNormRope (ext/kernels/qk_norm_rope.cu).
#pragma once

#include <vector>

#include "mlx/array.h"
#include "mlx/stream.h"

namespace pagecheck {

void eval_qk_norm_rope_gpu(
    const std::vector<mlx::core::array>& inputs,
    mlx::core::array& out,
    int num_q_heads,
    int num_kv_heads,
    float eps,
    float rope_base,
    mlx::core::Stream stream);

} // namespace pagecheck
