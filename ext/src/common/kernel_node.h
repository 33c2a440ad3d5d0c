// Where a custom kernel's MLX primitive comes from at each evaluation of our
// ops. MLX's kernel function (fast::cuda_kernel, fast::metal_kernel) makes a
// new primitive per call, writing the kernel's source, name and template
// arguments into it; the op then evaluates that primitive straight into its
// own outputs (gpu_dispatch.cpp's run_kernel, LazyCudaKernel::run). That
// making is host time at every call: on the H200 qk_norm_rope's submit is
// 14.4 us a call against 4.7 for a plain one-line custom kernel
// (ext/kernels/NOTES.md v23).
//
// With PAGECHECK_REUSE_KERNEL_NODES=1 the primitive is made once per key
// (kernel_node_key: everything the primitive keeps besides its source) and
// kept for the process (up to 1,024 keys), so later calls only evaluate it.
// Off by default: on the H200 it is correct (tests/test_gpu_attention.py's
// kept-primitives test) and cuts a plain kernel's submit about in half, but
// the attention op's submit is MLX's evaluation, not the making, and a
// decode step of the serving model was no faster with it (NOTES v24 item 3).
// Any other value than unset, empty, 0 or 1 is a ValueError naming it.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "mlx/array.h"
#include "mlx/fast.h"
#include "mlx/stream.h"

namespace pagecheck {

using KernelTemplateArgs = std::vector<std::pair<std::string, mlx::core::fast::TemplateArg>>;

// Whether PAGECHECK_REUSE_KERNEL_NODES asks for reuse (read at every call; std::invalid_argument for a bad value).
bool reuse_kernel_nodes();

// The key of a kernel's primitive: what MLX keeps in it besides the source (which `kernel` names: a
// kernel's name carries the sources' digest) — launch geometry, shared memory, template arguments, output
// fill, scalar arguments and stream.
std::string kernel_node_key(const std::string& kernel,
                            std::tuple<int, int, int> grid,
                            std::tuple<int, int, int> threadgroup,
                            int shared_bytes,
                            const KernelTemplateArgs& template_args,
                            std::optional<float> fill,
                            const std::vector<mlx::core::fast::ScalarArg>& scalars,
                            const mlx::core::Stream& stream);

// Evaluates a kernel primitive into `outputs` with `inputs` on the GPU: `make()` returns the kernel
// function's lazy outputs for these inputs (their primitive is the one evaluated). With reuse on, the
// primitive made for `key()` the first time is evaluated at every later call with that key (`key` is
// called only then, so the default path builds no key).
void eval_kernel_node(const std::function<std::string()>& key,
                      const std::function<std::vector<mlx::core::array>()>& make,
                      const std::vector<mlx::core::array>& inputs,
                      std::vector<mlx::core::array>& outputs);

} // namespace pagecheck
