// One MLX JIT CUDA kernel (a body file of ext/kernels), created on its first
// GPU call: on a build without the CUDA back-end cuda_kernel itself throws, and
// a CPU-only user must never pay for or see it. The serving ops'
// (quantized_embedding, qk_norm_rope) GPU routes; the attention kernels have
// their own table in gpu_dispatch.cpp.
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "mlx/array.h"
#include "mlx/fast.h"
#include "mlx/stream.h"

namespace pagecheck {

class LazyCudaKernel {
 public:
  // `op` names the op in errors; `stem` is the body file's name without .cu;
  // `inputs` and `outputs` name the body's arguments.
  LazyCudaKernel(std::string op, std::string stem, std::vector<std::string> inputs, std::vector<std::string> outputs)
      : op_(std::move(op)), stem_(std::move(stem)), inputs_(std::move(inputs)), outputs_(std::move(outputs)) {}

  // Runs the kernel now, from `inputs` (already computed) into `outputs`, in the current evaluation.
  // `init_value` fills the outputs first (a fill kernel and about 7 us of submit a call); without one
  // the outputs hold whatever their buffers held, which suits a kernel that writes every element
  // (libmlx 0.32.4 allocates them in device memory either way). Throws std::runtime_error naming the
  // missing back-end when this MLX build cannot compile CUDA kernels.
  void run(const std::vector<mlx::core::array>& inputs,
           std::vector<mlx::core::array> outputs,
           std::tuple<int, int, int> grid,
           std::tuple<int, int, int> threadgroup,
           const std::vector<std::pair<std::string, mlx::core::fast::TemplateArg>>& template_args,
           std::optional<float> init_value,
           mlx::core::Stream stream);

 private:
  const mlx::core::fast::CustomKernelFunction& kernel();

  std::string op_;
  std::string stem_;
  std::vector<std::string> inputs_;
  std::vector<std::string> outputs_;
  std::once_flag created_;
  std::optional<mlx::core::fast::CustomKernelFunction> kernel_;
  std::string creation_error_;
};

} // namespace pagecheck
