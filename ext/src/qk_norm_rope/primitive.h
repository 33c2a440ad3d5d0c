// QkNormRope: the primitive behind qk_norm_rope. It only computes; the op has
// checked shapes, dtypes and parameters.
#pragma once

#include <vector>

#include "mlx/primitives.h"

namespace pagecheck {

class QkNormRope : public mlx::core::Primitive {
 public:
  QkNormRope(mlx::core::Stream stream, int num_q_heads, int num_kv_heads, float eps, float rope_base)
      : mlx::core::Primitive(stream),
        num_q_heads_(num_q_heads),
        num_kv_heads_(num_kv_heads),
        eps_(eps),
        rope_base_(rope_base) {}

  // Inputs: qkv [B, L, (H_q + 2 H_kv) * D], q_norm [D], k_norm [D], offsets
  // int32 [B], all row-contiguous. Outputs: q [B, H_q, L, D], k and v
  // [B, H_kv, L, D], and the flat buffer that holds the three in turn; the
  // kernel writes the buffer, and q, k and v are row-contiguous views of it.
  void eval_cpu(const std::vector<mlx::core::array>& inputs, std::vector<mlx::core::array>& outputs) override;
  void eval_gpu(const std::vector<mlx::core::array>& inputs, std::vector<mlx::core::array>& outputs) override;

  const char* name() const override {
    return "QkNormRope";
  }
  bool is_equivalent(const mlx::core::Primitive& other) const override;
  std::vector<mlx::core::Shape> output_shapes(const std::vector<mlx::core::array>& inputs) override;

 private:
  int num_q_heads_;
  int num_kv_heads_;
  float eps_;
  float rope_base_;
};

} // namespace pagecheck
