#include "dense_attention/primitive.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "common/cpu_eval.h"
#include "common/dtype_dispatch.h"
#include "common/gpu_dispatch.h"
#include "common/gpu_plan.h"
#include "paged_attention/cpu_schedules.h"
#include "paged_attention/metadata_validation.h"

namespace pagecheck {

namespace mx = mlx::core;

AttentionShape dense_shape(const mx::array& query, const mx::array& key, float scale, bool causal) {
  AttentionShape shape;
  shape.batch = query.shape(0);
  shape.num_q_heads = query.shape(1);
  shape.query_len = query.shape(2);
  shape.head_dim = query.shape(3);
  shape.num_kv_heads = key.shape(1);
  // One page per request holding all S keys; S = 0 keeps a page size of 1 so
  // position arithmetic stays defined (no key is read: every context is 0).
  shape.page_size = std::max(1, key.shape(2));
  shape.pages_per_request = 1;
  shape.num_pages = key.shape(0);
  shape.scale = scale;
  shape.causal = causal;
  return shape;
}

void DenseAttention::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  mx::array& out = outputs[0];
  const AttentionShape shape = dense_shape(inputs[0], inputs[1], scale_, causal_);
  const int key_len = inputs[1].shape(2);
  const bool has_context_lens = has_context_lens_;
  auto& encoder = begin_cpu_eval("DenseAttention", inputs, out, stream());
  dispatch_storage_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    encoder.dispatch([shape, key_len, has_context_lens, arrays = task_arrays(inputs, out)]() mutable {
      const T* query = arrays[0].data<T>();
      const T* key = arrays[1].data<T>();
      const T* value = arrays[2].data<T>();
      const int32_t* given_context_lens = has_context_lens ? arrays[3].data<int32_t>() : nullptr;
      T* out_data = arrays.back().data<T>();
      std::vector<int32_t> block_table(shape.batch);
      std::iota(block_table.begin(), block_table.end(), 0);
      std::vector<int32_t> context_lens(shape.batch, key_len);
      if (given_context_lens != nullptr) {
        std::copy(given_context_lens, given_context_lens + shape.batch, context_lens.begin());
      }
      validate_context_lens(shape, context_lens.data(), key_len, "key length S");
      const AttentionOperands<T> operands{query, key, value, block_table.data(), context_lens.data(), out_data};
      run_attention_cpu<T>(shape, operands);
    });
  });
}

// The paged kernels over the view the CPU schedules use too: request b's
// keys are page b of S slots. The table kind tells the kernels so; the view
// needs no block-table array, so the graph holds no shape-dependent constant
// and shapeless compilation stays correct.
void DenseAttention::eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  eval_attention_gpu(
      dense_shape(inputs[0], inputs[1], scale_, causal_),
      has_context_lens_ ? GpuTable::kDenseWithLens : GpuTable::kDenseFull, inputs, outputs, stream());
}

std::vector<mx::Shape> DenseAttention::output_shapes(const std::vector<mx::array>& inputs) {
  if (stream().device != mx::Device::gpu) {
    return {inputs[0].shape()};
  }
  const AttentionShape shape = dense_shape(inputs[0], inputs[1], scale_, causal_);
  return gpu_output_shapes(shape, plan_gpu_call(shape, inputs[1].dtype(), gpu_caps(stream().device)));
}

bool DenseAttention::is_equivalent(const mx::Primitive& other) const {
  const auto* that = dynamic_cast<const DenseAttention*>(&other);
  return that != nullptr && scale_ == that->scale_ && causal_ == that->causal_ &&
      has_context_lens_ == that->has_context_lens_;
}

} // namespace pagecheck
