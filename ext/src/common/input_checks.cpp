#include "common/input_checks.h"

#include <cmath>
#include <stdexcept>

#include "common/error_text.h"
#include "mlx/utils.h"

namespace pagecheck {

namespace mx = mlx::core;

std::string shape_text(const mx::array& array) {
  ErrorText text;
  text << "(";
  for (int axis = 0; axis < array.ndim(); ++axis) {
    text << (axis > 0 ? ", " : "") << array.shape(axis);
  }
  text << (array.ndim() == 1 ? ",)" : ")");
  return text.str();
}

void check_ndim(const char* field, const mx::array& array, int ndim, const char* layout) {
  if (array.ndim() != ndim) {
    ErrorText message;
    message << "pagecheck: " << field << " must have " << ndim << " dimensions " << layout << ", got shape "
            << shape_text(array);
    throw std::invalid_argument(message.str());
  }
}

void check_attention_dtype(const char* field, const mx::array& array) {
  const mx::Dtype dtype = array.dtype();
  if (dtype != mx::float32 && dtype != mx::bfloat16 && dtype != mx::float16) {
    ErrorText message;
    message << "pagecheck: " << field << " dtype " << dtype << " is not supported; use float32, bfloat16 or float16";
    throw std::invalid_argument(message.str());
  }
}

void check_int32(const char* field, const mx::array& array) {
  if (array.dtype() != mx::int32) {
    ErrorText message;
    message << "pagecheck: " << field << " must be int32, got " << array.dtype();
    throw std::invalid_argument(message.str());
  }
}

void check_dim_equal(const char* field, int axis, const mx::array& array, int expected, const char* expected_name) {
  if (array.shape(axis) != expected) {
    ErrorText message;
    message << "pagecheck: " << field << ".shape[" << axis << "] = " << array.shape(axis) << " must equal "
            << expected_name << " = " << expected << " (shape " << shape_text(array) << ")";
    throw std::invalid_argument(message.str());
  }
}

void check_heads(int num_q_heads, int num_kv_heads, int head_dim) {
  ErrorText message;
  if (num_kv_heads <= 0 || num_q_heads <= 0) {
    message << "pagecheck: head counts must be positive, got H_q = " << num_q_heads << ", H_kv = " << num_kv_heads;
  } else if (num_q_heads % num_kv_heads != 0) {
    message << "pagecheck: H_q = " << num_q_heads << " is not a multiple of H_kv = " << num_kv_heads;
  } else if (head_dim <= 0) {
    message << "pagecheck: head_dim = " << head_dim << " must be positive";
  } else {
    return;
  }
  throw std::invalid_argument(message.str());
}

float resolve_scale(const float* scale, int head_dim) {
  if (scale == nullptr) {
    return 1.0f / std::sqrt(static_cast<float>(head_dim));
  }
  if (!std::isfinite(*scale)) {
    ErrorText message;
    message << "pagecheck: scale = " << *scale << " must be finite";
    throw std::invalid_argument(message.str());
  }
  return *scale;
}

} // namespace pagecheck
