#include "dense_attention/dense_attention.h"

#include <memory>
#include <stdexcept>
#include <vector>

#include "common/error_text.h"
#include "common/gpu_dispatch.h"
#include "common/gpu_plan.h"
#include "common/input_checks.h"
#include "common/ready_inputs.h"
#include "dense_attention/primitive.h"
#include "mlx/ops.h"
#include "paged_attention/metadata_validation.h"

namespace pagecheck {

namespace mx = mlx::core;

mx::array dense_attention(
    const mx::array& query,
    const mx::array& key,
    const mx::array& value,
    std::optional<float> scale,
    bool causal,
    const std::optional<mx::array>& context_lens,
    mx::StreamOrDevice stream) {
  check_ndim("query", query, 4, "[B, H_q, L, D]");
  check_ndim("key", key, 4, "[B, H_kv, S, D]");
  check_ndim("value", value, 4, "[B, H_kv, S, D]");
  check_attention_dtype("query", query);
  check_attention_dtype("key", key);
  if (value.dtype() != key.dtype()) {
    ErrorText message;
    message << "pagecheck: value dtype " << value.dtype() << " differs from key dtype " << key.dtype();
    throw std::invalid_argument(message.str());
  }
  if (value.shape() != key.shape()) {
    throw std::invalid_argument("pagecheck: value shape " + shape_text(value) + " differs from key shape " +
                                shape_text(key));
  }
  const int batch = query.shape(0);
  const int head_dim = query.shape(3);
  check_heads(query.shape(1), key.shape(1), head_dim);
  check_dim_equal("key", 0, key, batch, "query batch B");
  check_dim_equal("key", 3, key, head_dim, "query head dim D");
  if (context_lens) {
    check_ndim("context_lens", *context_lens, 1, "[B]");
    check_int32("context_lens", *context_lens);
    check_dim_equal("context_lens", 0, *context_lens, batch, "query batch B");
  }
  const float resolved_scale = resolve_scale(scale ? &*scale : nullptr, head_dim);
  const AttentionShape shape = dense_shape(query, key, resolved_scale, causal);
  const int key_len = key.shape(2);
  const mx::Stream resolved_stream = mx::to_stream(stream);
  if (!context_lens) {
    const std::vector<int32_t> full_contexts(batch, key_len);
    validate_context_lens(shape, full_contexts.data(), key_len, "key length S");
  } else {
    if (const std::optional<mx::array> context_values = host_int32_values(*context_lens, resolved_stream)) {
      validate_context_lens(shape, context_values->data<int32_t>(), key_len, "key length S");
    }
  }

  const mx::Dtype storage_dtype = key.dtype();
  std::vector<mx::array> inputs{
      row_contiguous_input(mx::astype(query, storage_dtype, stream), stream),
      row_contiguous_input(key, stream),
      row_contiguous_input(value, stream)};
  auto primitive =
      std::make_shared<DenseAttention>(resolved_stream, resolved_scale, causal, context_lens.has_value());
  if (resolved_stream.device != mx::Device::gpu) {
    if (context_lens) {
      inputs.push_back(row_contiguous_input(*context_lens, stream));
    }
    mx::array out = mx::array(query.shape(), storage_dtype, primitive, std::move(inputs));
    return query.dtype() == storage_dtype ? out : mx::astype(out, query.dtype(), stream);
  }
  if (key_len == 0) {
    return mx::zeros(query.shape(), query.dtype(), stream);
  }
  check_gpu_shape(shape);
  // The kernels' signature has a block table and context lengths; in the
  // dense view they read neither placeholder, which the host makes (no launch).
  const std::vector<int32_t> zero{0};
  inputs.push_back(mx::array(zero.begin(), {1, 1}, mx::int32));
  inputs.push_back(context_lens ? row_contiguous_input(*context_lens, stream) : mx::array(zero.begin(), {1}, mx::int32));
  const GpuPlan plan = plan_gpu_call(shape, storage_dtype, gpu_caps(resolved_stream.device));
  mx::array out =
      mx::array::make_arrays(gpu_output_shapes(shape, plan), gpu_output_dtypes(storage_dtype), primitive, inputs)[0];
  return query.dtype() == storage_dtype ? out : mx::astype(out, query.dtype(), stream);
}

} // namespace pagecheck
