#include "dense_attention/dense_attention.h"

#include <memory>
#include <sstream>
#include <stdexcept>
#include <vector>

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
    std::ostringstream message;
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
  if (!context_lens) {
    const std::vector<int32_t> full_contexts(batch, key_len);
    validate_context_lens(shape, full_contexts.data(), key_len, "key length S");
  } else {
    mx::array context_values = *context_lens;
    if (const int32_t* ready_contexts = ready_int32_values(context_values)) {
      validate_context_lens(shape, ready_contexts, key_len, "key length S");
    }
  }

  const mx::Dtype storage_dtype = key.dtype();
  std::vector<mx::array> inputs{
      row_contiguous_input(mx::astype(query, storage_dtype, stream), stream),
      row_contiguous_input(key, stream),
      row_contiguous_input(value, stream)};
  if (context_lens) {
    inputs.push_back(row_contiguous_input(*context_lens, stream));
  }
  auto primitive = std::make_shared<DenseAttention>(mx::to_stream(stream), resolved_scale, causal,
                                                    context_lens.has_value());
  mx::array out = mx::array(query.shape(), storage_dtype, primitive, std::move(inputs));
  return query.dtype() == storage_dtype ? out : mx::astype(out, query.dtype(), stream);
}

} // namespace pagecheck
