#include "paged_attention/primitive.h"

#include <stdexcept>

#include "common/cpu_eval.h"
#include "common/dtype_dispatch.h"
#include "common/gpu_dispatch.h"
#include "common/gpu_plan.h"
#include "paged_attention/cpu_schedules.h"
#include "paged_attention/metadata_validation.h"

namespace pagecheck {

namespace mx = mlx::core;

AttentionShape paged_shape(
    const mx::array& query,
    const mx::array& key_pages,
    const mx::array& block_table,
    int page_size,
    float scale,
    bool causal) {
  AttentionShape shape;
  shape.batch = query.shape(0);
  shape.num_q_heads = query.shape(1);
  shape.query_len = query.shape(2);
  shape.head_dim = query.shape(3);
  shape.num_pages = key_pages.shape(0);
  shape.num_kv_heads = key_pages.shape(1);
  shape.page_size = page_size;
  shape.pages_per_request = block_table.shape(1);
  shape.scale = scale;
  shape.causal = causal;
  return shape;
}

void PagedAttention::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  mx::array& out = outputs[0];
  const AttentionShape shape = paged_shape(inputs[0], inputs[1], inputs[3], page_size_, scale_, causal_);
  auto& encoder = begin_cpu_eval("PagedAttention", inputs, out, stream());
  dispatch_storage_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    encoder.dispatch([shape, arrays = task_arrays(inputs, out)]() mutable {
      const AttentionOperands<T> operands{
          arrays[0].data<T>(), arrays[1].data<T>(), arrays[2].data<T>(),
          arrays[3].data<int32_t>(), arrays[4].data<int32_t>(), arrays[5].data<T>()};
      validate_paged_metadata(shape, operands.block_table, operands.context_lens);
      run_attention_cpu<T>(shape, operands);
    });
  });
}

void PagedAttention::eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  eval_attention_gpu(
      paged_shape(inputs[0], inputs[1], inputs[3], page_size_, scale_, causal_), GpuTable::kPaged, inputs, outputs,
      stream());
}

std::vector<mx::Shape> PagedAttention::output_shapes(const std::vector<mx::array>& inputs) {
  if (stream().device != mx::Device::gpu) {
    return {inputs[0].shape()};
  }
  const AttentionShape shape = paged_shape(inputs[0], inputs[1], inputs[3], page_size_, scale_, causal_);
  return gpu_output_shapes(shape, plan_gpu_call(shape, inputs[1].dtype(), gpu_caps(stream().device)));
}

bool PagedAttention::is_equivalent(const mx::Primitive& other) const {
  const auto* that = dynamic_cast<const PagedAttention*>(&other);
  return that != nullptr && page_size_ == that->page_size_ && scale_ == that->scale_ && causal_ == that->causal_;
}

} // namespace pagecheck
