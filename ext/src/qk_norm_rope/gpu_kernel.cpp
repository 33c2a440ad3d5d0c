#include "qk_norm_rope/gpu_kernel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>

#include "common/kernel_sources.h"
#include "mlx/fast.h"
#include "mlx/primitives.h"

namespace pagecheck {

namespace mx = mlx::core;

namespace {

constexpr int kThreadsPerBlock = 128;
constexpr int kLanes = 32;

// Created on the first GPU call: on a build without the CUDA back-end,
// cuda_kernel itself throws, and a CPU-only user must never pay for or see it.
const mx::fast::CustomKernelFunction& qk_norm_rope_kernel() {
  static std::once_flag created;
  static std::optional<mx::fast::CustomKernelFunction> kernel;
  static std::string creation_error;
  std::call_once(created, [] {
    try {
      kernel = mx::fast::cuda_kernel(
          std::string("pagecheck_qk_norm_rope_") + kernel_sources_digest(),
          {"qkv", "q_norm", "k_norm", "offsets"},
          {"out"},
          kernel_file("qk_norm_rope.cu"),
          "",
          /*ensure_row_contiguous=*/true);
    } catch (const std::exception& error) {
      creation_error = error.what();
    }
  });
  if (!kernel) {
    throw std::runtime_error(
        "pagecheck: qk_norm_rope has no GPU kernel in this MLX build (its CUDA kernel needs mlx[cuda13]; MLX "
        "said: " + creation_error + "); run it on the CPU stream");
  }
  return *kernel;
}

// A float's bit pattern as the int template argument the kernel reads back with __int_as_float.
int float_bits(float value) {
  int bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

} // namespace

void eval_qk_norm_rope_gpu(
    const std::vector<mx::array>& inputs,
    mx::array& out,
    int num_q_heads,
    int num_kv_heads,
    float eps,
    float rope_base,
    mx::Stream stream) {
  const mx::fast::CustomKernelFunction& kernel = qk_norm_rope_kernel();
  const mx::array& qkv = inputs[0];
  const int row_heads = num_q_heads + 2 * num_kv_heads;
  const int head_dim = qkv.shape(2) / row_heads;
  const int64_t rows = static_cast<int64_t>(qkv.shape(0)) * qkv.shape(1) * row_heads;
  // The op keeps rows * 32 within int. The output is zero-filled first: that gives it device memory (without
  // an initial value the custom kernel allocates managed memory; common/gpu_dispatch.cpp).
  std::vector<mx::array> launched = kernel(
      inputs,
      {out.shape()},
      {out.dtype()},
      std::make_tuple(static_cast<int>(std::max<int64_t>(rows, 1) * kLanes), 1, 1),
      std::make_tuple(kThreadsPerBlock, 1, 1),
      {{"T", out.dtype()},
       {"HEAD_DIM", head_dim},
       {"NUM_Q_HEADS", num_q_heads},
       {"NUM_KV_HEADS", num_kv_heads},
       {"EPS_BITS", float_bits(eps)},
       {"LOG2_BASE_BITS", float_bits(std::log2(rope_base))}},
      0.0f,
      false,
      stream);
  std::vector<mx::array> outputs{out};
  launched[0].primitive().eval_gpu(inputs, outputs);
}

} // namespace pagecheck
