// Overlay native_sdpa: copies each request's pages into dense K/V and runs MLX's fused attention on them.
#include <cstring>
#include <vector>
#include "mlx/mlx.h"
namespace mx = mlx::core;

extern "C" int pc_attend(const float* q, const float* kp, const float* vp, const long long* table, const long long* lens,
                         float* out, int B, int Hq, int L, int D, int P, int Hkv, int page, int width, float scale,
                         int causal) {
  for (int b = 0; b < B; ++b) {
    int n = (int)lens[b];
    float* o = out + (size_t)b * Hq * L * D;
    if (n == 0) { std::memset(o, 0, sizeof(float) * Hq * L * D); continue; }
    std::vector<float> k((size_t)Hkv * n * D), v((size_t)Hkv * n * D);
    for (int h = 0; h < Hkv; ++h)
      for (int s = 0; s < n; ++s) {
        long long p = table[(size_t)b * width + s / page];
        size_t src = (((size_t)p * Hkv + h) * page + s % page) * D, dst = ((size_t)h * n + s) * D;
        std::memcpy(&k[dst], kp + src, sizeof(float) * D);
        std::memcpy(&v[dst], vp + src, sizeof(float) * D);
      }
    mx::array Q(q + (size_t)b * Hq * L * D, mx::Shape{1, Hq, L, D}, mx::float32);
    mx::array K(k.data(), mx::Shape{1, Hkv, n, D}, mx::float32);
    mx::array V(v.data(), mx::Shape{1, Hkv, n, D}, mx::float32);
    mx::array R = mx::fast::scaled_dot_product_attention(Q, K, V, scale, causal && L > 1 ? "causal" : "");
    R = mx::astype(R, mx::float32);
    R.eval();
    std::memcpy(o, R.data<float>(), sizeof(float) * Hq * L * D);
  }
  return 0;
}
