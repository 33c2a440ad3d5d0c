// Shape and dtype checks shared by the attention ops. Each throws
// std::invalid_argument (ValueError in Python) naming the field and value.
#pragma once

#include <string>

#include "mlx/array.h"

namespace pagecheck {

std::string shape_text(const mlx::core::array& array);

void check_ndim(const char* field, const mlx::core::array& array, int ndim, const char* layout);

// float32, bfloat16 or float16.
void check_attention_dtype(const char* field, const mlx::core::array& array);

void check_int32(const char* field, const mlx::core::array& array);

void check_dim_equal(const char* field, int axis, const mlx::core::array& array, int expected,
                     const char* expected_name);

// Hq > 0, Hkv > 0 and Hq a multiple of Hkv; D > 0.
void check_heads(int num_q_heads, int num_kv_heads, int head_dim);

// Returns the scale to use: the given one (finite) or head_dim ** -0.5.
float resolve_scale(const float* scale, int head_dim);

} // namespace pagecheck
