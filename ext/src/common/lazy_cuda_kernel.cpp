#include "common/lazy_cuda_kernel.h"

#include <stdexcept>

#include "common/kernel_node.h"
#include "common/kernel_sources.h"
#include "mlx/primitives.h"

namespace pagecheck {

namespace mx = mlx::core;

const mx::fast::CustomKernelFunction& LazyCudaKernel::kernel() {
  std::call_once(created_, [this] {
    try {
      kernel_ = mx::fast::cuda_kernel(
          "pagecheck_" + stem_ + "_" + kernel_sources_digest(), inputs_, outputs_, kernel_file(stem_ + ".cu"), "",
          /*ensure_row_contiguous=*/true);
    } catch (const std::exception& error) {
      creation_error_ = error.what();
    }
  });
  if (!kernel_) {
    throw std::runtime_error("pagecheck: " + op_ + " has no GPU kernel in this MLX build (its CUDA kernel needs "
                             "mlx[cuda13]; MLX said: " + creation_error_ + "); run it on the CPU stream");
  }
  return *kernel_;
}

void LazyCudaKernel::run(const std::vector<mx::array>& inputs,
                         std::vector<mx::array> outputs,
                         std::tuple<int, int, int> grid,
                         std::tuple<int, int, int> threadgroup,
                         const std::vector<std::pair<std::string, mx::fast::TemplateArg>>& template_args,
                         std::optional<float> init_value,
                         mx::Stream stream) {
  std::vector<mx::Shape> shapes;
  std::vector<mx::Dtype> dtypes;
  for (const mx::array& out : outputs) {
    shapes.push_back(out.shape());
    dtypes.push_back(out.dtype());
  }
  // The kernel function builds a graph node around MLX's CustomKernel primitive; running that primitive
  // directly on these inputs and outputs launches the kernel inside the current evaluation.
  eval_kernel_node(
      [&] { return kernel_node_key(stem_, grid, threadgroup, 0, template_args, init_value, {}, stream); },
      [&] { return kernel()(inputs, shapes, dtypes, grid, threadgroup, template_args, init_value, false, stream); },
      inputs, outputs);
}

} // namespace pagecheck
