// QuantizedEmbedding: the primitive behind quantized_embedding. It only
// computes; the op has checked shapes, dtypes and (when already computed) ids.
#pragma once

#include <vector>

#include "mlx/primitives.h"

namespace pagecheck {

class QuantizedEmbedding : public mlx::core::UnaryPrimitive {
 public:
  QuantizedEmbedding(mlx::core::Stream stream, int group_size, int bits)
      : mlx::core::UnaryPrimitive(stream), group_size_(group_size), bits_(bits) {}

  // Inputs: ids int32 [N], weight uint32 [V, W], scales [V, G], biases [V, G].
  // Output [N, D] with D = W * 32 / bits.
  void eval_cpu(const std::vector<mlx::core::array>& inputs, mlx::core::array& out) override;
  void eval_gpu(const std::vector<mlx::core::array>& inputs, mlx::core::array& out) override;

  const char* name() const override {
    return "QuantizedEmbedding";
  }
  bool is_equivalent(const mlx::core::Primitive& other) const override;
  std::vector<mlx::core::Shape> output_shapes(const std::vector<mlx::core::array>& inputs) override;

 private:
  int group_size_;
  int bits_;
};

} // namespace pagecheck
