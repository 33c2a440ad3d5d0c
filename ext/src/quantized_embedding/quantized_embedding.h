// quantized_embedding: one dispatch that reads the rows of an affine-quantized
// table (the layout of mx.quantize) for a batch of token ids and dequantizes
// them, without ever materializing the dequantized table.
#pragma once

#include "mlx/array.h"
#include "mlx/utils.h"

namespace pagecheck {

// Bit widths and group sizes the kernels are built for; every other value is
// rejected by the op before anything runs.
inline constexpr int kEmbeddingBits[] = {4, 8};
inline constexpr int kEmbeddingGroupSizes[] = {32, 64, 128};

// ids int32 of any shape; weight uint32 [V, D * bits / 32]; scales and biases
// [V, D / group_size] in float32, bfloat16 or float16. Returns
// ids.shape + [D] in the dtype of scales: row ids[i] of
// dequantize(weight, scales, biases), computed as MLX's dequantize does.
mlx::core::array quantized_embedding(
    const mlx::core::array& ids,
    const mlx::core::array& weight,
    const mlx::core::array& scales,
    const mlx::core::array& biases,
    int group_size,
    int bits,
    mlx::core::StreamOrDevice stream = {});

} // namespace pagecheck
