// DenseAttention: runs the paged CPU schedules on a dense [B, Hkv, S, D] K/V
// viewed as B pages of S slots with block_table[b] = {b}.
#pragma once

#include <vector>

#include "common/attention_shape.h"
#include "mlx/primitives.h"

namespace pagecheck {

// The geometry of a dense call seen as one page of S slots per request.
AttentionShape dense_shape(const mlx::core::array& query, const mlx::core::array& key, float scale, bool causal);

class DenseAttention : public mlx::core::UnaryPrimitive {
 public:
  DenseAttention(mlx::core::Stream stream, float scale, bool causal, bool has_context_lens)
      : mlx::core::UnaryPrimitive(stream), scale_(scale), causal_(causal), has_context_lens_(has_context_lens) {}

  // Inputs: query, key, value, and context_lens when has_context_lens.
  void eval_cpu(const std::vector<mlx::core::array>& inputs, mlx::core::array& out) override;
  void eval_gpu(const std::vector<mlx::core::array>& inputs, mlx::core::array& out) override;

  const char* name() const override {
    return "DenseAttention";
  }
  bool is_equivalent(const mlx::core::Primitive& other) const override;
  std::vector<mlx::core::Shape> output_shapes(const std::vector<mlx::core::array>& inputs) override {
    return {inputs[0].shape()};
  }

 private:
  float scale_;
  bool causal_;
  bool has_context_lens_;
};

} // namespace pagecheck
