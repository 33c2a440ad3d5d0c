// Conversions between the storage dtypes and the float32 the kernels compute
// in. bfloat16 -> float32 is a 16-bit shift, written so the compiler
// vectorizes it; float16 uses F16C where the build target has it.
#pragma once

#include <bit>
#include <cstdint>

#include "mlx/types/half_types.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace pagecheck {

using mlx::core::bfloat16_t;
using mlx::core::float16_t;

inline void load_floats(const float* src, float* dst, int count) {
  for (int idx = 0; idx < count; ++idx) {
    dst[idx] = src[idx];
  }
}

inline void load_floats(const bfloat16_t* src, float* dst, int count) {
  const auto* bits = reinterpret_cast<const uint16_t*>(src);
  for (int idx = 0; idx < count; ++idx) {
    dst[idx] = std::bit_cast<float>(static_cast<uint32_t>(bits[idx]) << 16);
  }
}

inline void load_floats(const float16_t* src, float* dst, int count) {
  int idx = 0;
#if defined(__F16C__)
  const auto* bits = reinterpret_cast<const __m128i*>(src);
  for (; idx + 8 <= count; idx += 8) {
    _mm256_storeu_ps(dst + idx, _mm256_cvtph_ps(_mm_loadu_si128(bits + idx / 8)));
  }
#endif
  for (; idx < count; ++idx) {
    dst[idx] = static_cast<float>(src[idx]);
  }
}

// Rounds to nearest even (MLX's own conversions), NaN stays NaN.
template <typename T>
inline T store_float(float value) {
  return static_cast<T>(value);
}

} // namespace pagecheck
