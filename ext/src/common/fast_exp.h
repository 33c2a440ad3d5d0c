// exp for softmax weights, written so the compiler vectorizes it (libm's expf
// is a call per element). exp(x) = 2^n * exp(r) with n = round(x / ln 2) and
// |r| <= ln 2 / 2; exp(r) by its degree-6 Taylor polynomial (relative error
// below 2e-7, the size of one float32 rounding). Inputs below -87 return
// about 1.6e-38 instead of a denormal; NaN stays NaN.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace pagecheck {

inline float fast_exp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2 = 0.693147180559945309f;
  constexpr float kMinInput = -87.0f;
  constexpr float kMaxInput = 88.0f;
  // Comparisons written so NaN takes the first branch's alternative (a
  // finite value) here; the NaN is restored at the end.
  float clamped = x > kMinInput ? x : kMinInput;
  clamped = clamped < kMaxInput ? clamped : kMaxInput;
  const float exponent = std::floor(clamped * kLog2e + 0.5f);
  const float r = clamped - exponent * kLn2;
  float poly = 1.0f / 720.0f;
  poly = poly * r + 1.0f / 120.0f;
  poly = poly * r + 1.0f / 24.0f;
  poly = poly * r + 1.0f / 6.0f;
  poly = poly * r + 0.5f;
  poly = poly * r + 1.0f;
  poly = poly * r + 1.0f;
  const int32_t exponent_bits = (static_cast<int32_t>(exponent) + 127) << 23;
  const float result = poly * std::bit_cast<float>(exponent_bits);
  return x == x ? result : x;
}

} // namespace pagecheck
