// PagedAttention: the primitive behind paged_attention. It only computes;
// the op has checked shapes and dtypes, and eval checks the metadata values.
#pragma once

#include <vector>

#include "common/attention_shape.h"
#include "mlx/primitives.h"

namespace pagecheck {

// The geometry of a paged call from its query, key pages and block table.
AttentionShape paged_shape(
    const mlx::core::array& query,
    const mlx::core::array& key_pages,
    const mlx::core::array& block_table,
    int page_size,
    float scale,
    bool causal);

class PagedAttention : public mlx::core::UnaryPrimitive {
 public:
  PagedAttention(mlx::core::Stream stream, int page_size, float scale, bool causal)
      : mlx::core::UnaryPrimitive(stream), page_size_(page_size), scale_(scale), causal_(causal) {}

  // Inputs: query, key_pages, value_pages, block_table, context_lens.
  void eval_cpu(const std::vector<mlx::core::array>& inputs, mlx::core::array& out) override;
  void eval_gpu(const std::vector<mlx::core::array>& inputs, mlx::core::array& out) override;

  const char* name() const override {
    return "PagedAttention";
  }
  bool is_equivalent(const mlx::core::Primitive& other) const override;
  std::vector<mlx::core::Shape> output_shapes(const std::vector<mlx::core::array>& inputs) override {
    return {inputs[0].shape()};
  }

  int page_size() const {
    return page_size_;
  }
  float scale() const {
    return scale_;
  }
  bool causal() const {
    return causal_;
  }

 private:
  int page_size_;
  float scale_;
  bool causal_;
};

} // namespace pagecheck
