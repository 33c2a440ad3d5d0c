// The GPU route of QuantizedEmbedding: MLX's JIT CUDA kernel with the body in
// ext/kernels/quantized_embedding.cu, created on the first GPU call.
#pragma once

#include <vector>

#include "mlx/array.h"
#include "mlx/stream.h"

namespace pagecheck {

// Fills out [N, D] from inputs (ids, weight, scales, biases) on `stream`.
// Throws std::runtime_error naming the missing back-end when this MLX build
// cannot compile CUDA kernels (a CPU-only or Metal build).
void eval_quantized_embedding_gpu(
    const std::vector<mlx::core::array>& inputs,
    mlx::core::array& out,
    int group_size,
    int bits,
    mlx::core::Stream stream);

} // namespace pagecheck
