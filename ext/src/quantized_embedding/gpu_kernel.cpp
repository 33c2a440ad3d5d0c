#include "quantized_embedding/gpu_kernel.h"

#include <algorithm>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include "mlx/fast.h"
#include "mlx/primitives.h"
#include "common/kernel_sources.h"

namespace pagecheck {

namespace mx = mlx::core;

namespace {

constexpr int kThreadsPerBlock = 256;

// Created on the first GPU call: on a build without the CUDA back-end,
// cuda_kernel itself throws, and a CPU-only user must never pay for or see it.
const mx::fast::CustomKernelFunction& quantized_embedding_kernel() {
  static std::once_flag created;
  static std::optional<mx::fast::CustomKernelFunction> kernel;
  static std::string creation_error;
  std::call_once(created, [] {
    try {
      kernel = mx::fast::cuda_kernel(
          std::string("pagecheck_quantized_embedding_") + kernel_sources_digest(),
          {"ids", "weight", "scales", "biases"},
          {"out"},
          kernel_file("quantized_embedding.cu"),
          "",
          /*ensure_row_contiguous=*/true);
    } catch (const std::exception& error) {
      creation_error = error.what();
    }
  });
  if (!kernel) {
    throw std::runtime_error(
        "pagecheck: quantized_embedding has no GPU kernel in this MLX build (its CUDA kernel needs "
        "mlx[cuda13]; MLX said: " + creation_error + "); run it on the CPU stream");
  }
  return *kernel;
}

} // namespace

void eval_quantized_embedding_gpu(
    const std::vector<mx::array>& inputs,
    mx::array& out,
    int group_size,
    int bits,
    mx::Stream stream) {
  const mx::fast::CustomKernelFunction& kernel = quantized_embedding_kernel();
  const int num_threads = static_cast<int>(inputs[0].size()) * inputs[1].shape(1);
  // The kernel function builds a graph node around MLX's CustomKernel
  // primitive; running that primitive directly on this primitive's inputs and
  // output launches the kernel inside the current evaluation.
  std::vector<mx::array> launched = kernel(
      inputs,
      {out.shape()},
      {out.dtype()},
      std::make_tuple(std::max(num_threads, 1), 1, 1),
      std::make_tuple(kThreadsPerBlock, 1, 1),
      {{"T", out.dtype()}, {"BITS", bits}, {"GROUP_SIZE", group_size}},
      std::nullopt,
      false,
      stream);
  std::vector<mx::array> outputs{out};
  launched[0].primitive().eval_gpu(inputs, outputs);
}

} // namespace pagecheck
