// The op: checks shapes and dtypes, and on the CPU stream the metadata values
// (common/ready_inputs.h says when they are checked in the task instead),
// promotes the query to the K/V storage dtype, makes every input row
// contiguous (skipped for computed arrays that already are), on a GPU stream
// reads context lengths of one or two requests from device memory
// (resident_lens.h), and builds the primitive.
#include "paged_attention/paged_attention.h"

#include <climits>
#include <memory>
#include <stdexcept>

#include "common/error_text.h"
#include "common/gpu_dispatch.h"
#include "common/gpu_plan.h"
#include "common/input_checks.h"
#include "common/ready_inputs.h"
#include "mlx/ops.h"
#include "paged_attention/metadata_validation.h"
#include "paged_attention/primitive.h"
#include "paged_attention/resident_lens.h"

namespace pagecheck {

namespace mx = mlx::core;

namespace {

// The managed scalar pool is MLX's CUDA allocator's (resident_lens.h); Metal's
// memory is unified, so there the lengths are read where they are.
#ifdef __APPLE__
constexpr bool kCopySmallLens = false;
#else
constexpr bool kCopySmallLens = true;
#endif

} // namespace

mx::array paged_attention(
    const mx::array& query,
    const mx::array& key_pages,
    const mx::array& value_pages,
    const mx::array& block_table,
    const mx::array& context_lens,
    int page_size,
    std::optional<float> scale,
    bool causal,
    mx::StreamOrDevice stream) {
  check_ndim("query", query, 4, "[B, H_q, L, D]");
  check_ndim("key_pages", key_pages, 4, "[P, H_kv, page_size, D]");
  check_ndim("value_pages", value_pages, 4, "[P, H_kv, page_size, D]");
  check_ndim("block_table", block_table, 2, "[B, max_pages]");
  check_ndim("context_lens", context_lens, 1, "[B]");
  check_attention_dtype("query", query);
  check_attention_dtype("key_pages", key_pages);
  check_int32("block_table", block_table);
  check_int32("context_lens", context_lens);
  if (value_pages.dtype() != key_pages.dtype()) {
    ErrorText message;
    message << "pagecheck: value_pages dtype " << value_pages.dtype() << " differs from key_pages dtype "
            << key_pages.dtype();
    throw std::invalid_argument(message.str());
  }
  if (value_pages.shape() != key_pages.shape()) {
    throw std::invalid_argument("pagecheck: value_pages shape " + shape_text(value_pages) +
                                " differs from key_pages shape " + shape_text(key_pages));
  }
  if (page_size <= 0) {
    ErrorText message;
    message << "pagecheck: page_size = " << page_size << " must be positive";
    throw std::invalid_argument(message.str());
  }
  const int batch = query.shape(0);
  const int head_dim = query.shape(3);
  check_heads(query.shape(1), key_pages.shape(1), head_dim);
  check_dim_equal("key_pages", 2, key_pages, page_size, "page_size");
  check_dim_equal("key_pages", 3, key_pages, head_dim, "query head dim D");
  check_dim_equal("block_table", 0, block_table, batch, "query batch B");
  check_dim_equal("context_lens", 0, context_lens, batch, "query batch B");
  if (static_cast<int64_t>(block_table.shape(1)) * page_size > INT_MAX) {
    throw std::invalid_argument("pagecheck: block_table columns * page_size exceeds the int32 position range");
  }
  const float resolved_scale = resolve_scale(scale ? &*scale : nullptr, head_dim);
  const mx::Stream resolved_stream = mx::to_stream(stream);
  const std::optional<mx::array> table_values = host_int32_values(block_table, resolved_stream);
  const std::optional<mx::array> context_values = host_int32_values(context_lens, resolved_stream);
  if (table_values && context_values) {
    validate_paged_metadata(paged_shape(query, key_pages, block_table, page_size, resolved_scale, causal),
                            table_values->data<int32_t>(), context_values->data<int32_t>());
  }

  const mx::Dtype storage_dtype = key_pages.dtype();
  auto primitive = std::make_shared<PagedAttention>(resolved_stream, page_size, resolved_scale, causal);
  std::vector<mx::array> inputs{
      row_contiguous_input(mx::astype(query, storage_dtype, stream), stream),
      row_contiguous_input(key_pages, stream),
      row_contiguous_input(value_pages, stream),
      row_contiguous_input(block_table, stream),
      row_contiguous_input(
          kCopySmallLens && resolved_stream.device == mx::Device::gpu ? device_resident_lens(context_lens, stream)
                                                                      : context_lens,
          stream)};
  mx::array out = [&] {
    if (resolved_stream.device != mx::Device::gpu) {
      return mx::array(query.shape(), storage_dtype, primitive, std::move(inputs));
    }
    const AttentionShape shape = paged_shape(query, key_pages, block_table, page_size, resolved_scale, causal);
    check_gpu_shape(shape);
    const GpuPlan plan = plan_gpu_call(shape, storage_dtype, gpu_caps(resolved_stream.device));
    return mx::array::make_arrays(
        gpu_output_shapes(shape, plan), gpu_output_dtypes(storage_dtype), primitive, inputs)[0];
  }();
  return query.dtype() == storage_dtype ? out : mx::astype(out, query.dtype(), stream);
}

} // namespace pagecheck
