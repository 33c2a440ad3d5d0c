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

// Inputs: query, key_pages, value_pages, block_table, context_lens; on a GPU
// stream also the scale as a float32 scalar (the kernels read it from memory).
// Outputs: the attention output; on a GPU stream also the split-decode scratch
// (common/gpu_plan.h), outputs so that it lives until the kernels that read it
// have run.
class PagedAttention : public mlx::core::Primitive {
 public:
  PagedAttention(mlx::core::Stream stream, int page_size, float scale, bool causal)
      : mlx::core::Primitive(stream), page_size_(page_size), scale_(scale), causal_(causal) {}

  void eval_cpu(const std::vector<mlx::core::array>& inputs, std::vector<mlx::core::array>& outputs) override;
  void eval_gpu(const std::vector<mlx::core::array>& inputs, std::vector<mlx::core::array>& outputs) override;

  const char* name() const override {
    return "PagedAttention";
  }
  bool is_equivalent(const mlx::core::Primitive& other) const override;
  std::vector<mlx::core::Shape> output_shapes(const std::vector<mlx::core::array>& inputs) override;

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
