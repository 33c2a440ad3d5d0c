#include "qk_norm_rope/qk_norm_rope.h"

#include <climits>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <vector>

#include "common/error_text.h"
#include "common/input_checks.h"
#include "common/ready_inputs.h"
#include "mlx/ops.h"
#include "qk_norm_rope/primitive.h"

namespace pagecheck {

namespace mx = mlx::core;

namespace {

void check_positive_count(const char* field, int value) {
  if (value <= 0) {
    ErrorText message;
    message << "pagecheck: " << field << " = " << value << " must be positive";
    throw std::invalid_argument(message.str());
  }
}

void check_norm_weight(const char* field, const mx::array& weight, const mx::array& qkv, int head_dim) {
  check_ndim(field, weight, 1, "[D]");
  check_dim_equal(field, 0, weight, head_dim, "head dim D");
  if (weight.dtype() != qkv.dtype()) {
    ErrorText message;
    message << "pagecheck: " << field << " dtype " << weight.dtype() << " differs from qkv dtype " << qkv.dtype();
    throw std::invalid_argument(message.str());
  }
}

} // namespace

std::vector<mx::array> qk_norm_rope(
    const mx::array& qkv,
    const mx::array& q_norm,
    const mx::array& k_norm,
    const mx::array& offsets,
    int num_q_heads,
    int num_kv_heads,
    float eps,
    float rope_base,
    mx::StreamOrDevice stream) {
  check_positive_count("num_q_heads", num_q_heads);
  check_positive_count("num_kv_heads", num_kv_heads);
  check_ndim("qkv", qkv, 3, "[B, L, (H_q + 2 H_kv) * D]");
  check_attention_dtype("qkv", qkv);
  const int row_heads = num_q_heads + 2 * num_kv_heads;
  const int width = qkv.shape(2);
  if (width % row_heads != 0 || (width / row_heads) % 2 != 0 || width == 0) {
    ErrorText message;
    message << "pagecheck: qkv.shape[2] = " << width << " must be (H_q + 2 H_kv) * D = " << row_heads
            << " * D for an even head dim D > 0 (shape " << shape_text(qkv) << ")";
    throw std::invalid_argument(message.str());
  }
  const int head_dim = width / row_heads;
  check_norm_weight("q_norm", q_norm, qkv, head_dim);
  check_norm_weight("k_norm", k_norm, qkv, head_dim);
  check_int32("offsets", offsets);
  check_ndim("offsets", offsets, 1, "[B]");
  check_dim_equal("offsets", 0, offsets, qkv.shape(0), "batch B");
  if (!std::isfinite(eps) || eps < 0.0f) {
    ErrorText message;
    message << "pagecheck: eps = " << eps << " must be finite and >= 0";
    throw std::invalid_argument(message.str());
  }
  if (!std::isfinite(rope_base) || rope_base <= 1.0f) {
    ErrorText message;
    message << "pagecheck: rope_base = " << rope_base << " must be finite and > 1";
    throw std::invalid_argument(message.str());
  }
  if (static_cast<int64_t>(qkv.shape(0)) * qkv.shape(1) * row_heads * 32 > INT_MAX || qkv.size() > INT_MAX) {
    ErrorText message;
    message << "pagecheck: qkv shape " << shape_text(qkv) << " is larger than one kernel launch takes ("
            << INT_MAX / 32 << " (b, l, head) rows, " << INT_MAX << " elements)";
    throw std::invalid_argument(message.str());
  }

  std::vector<mx::array> inputs{
      row_contiguous_input(qkv, stream),
      row_contiguous_input(q_norm, stream),
      row_contiguous_input(k_norm, stream),
      row_contiguous_input(offsets, stream)};
  // +0.0 for -0.0: the kernel receives eps as its bit pattern.
  auto primitive = std::make_shared<QkNormRope>(mx::to_stream(stream), num_q_heads, num_kv_heads, eps + 0.0f,
                                                rope_base);
  std::vector<mx::array> outputs =
      mx::array::make_arrays(primitive->output_shapes(inputs), std::vector<mx::Dtype>(4, qkv.dtype()), primitive,
                             inputs);
  outputs.pop_back();  // the buffer q, k and v view
  return outputs;
}

} // namespace pagecheck
