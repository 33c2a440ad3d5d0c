// The GPU side of the attention primitives: eval_gpu comes here and runs the
// kernels of ext/kernels/ that plan_gpu_call (gpu_plan.h) picks by query
// length: decode (L <= 8) in one pass, or split across blocks and merged by a
// second small kernel; prefill (L > 8) on tensor cores or CUDA cores.
//
// The kernels are JIT-compiled through mlx::core::fast::cuda_kernel
// (fast::metal_kernel on macOS) from the embedded sources, each created on
// its first use. A libmlx without that back-end turns the first call into a
// std::runtime_error that says so. The warpgroup prefill, which MLX's JIT
// cannot compile (sm_90a), is compiled here (nvrtc_compile.h) and run through
// fast::precompiled_cuda_kernel.
#pragma once

#include <string>
#include <vector>

#include "common/attention_shape.h"
#include "common/gpu_plan.h"
#include "mlx/array.h"
#include "mlx/device.h"
#include "mlx/stream.h"

namespace pagecheck {

// What `device` offers the plan: tensor cores in every CUDA build (the Metal
// mirrors have none), warpgroup MMA on a device of compute capability 9.0
// while its kernels compile (a failed compile turns it off for the process,
// with one line on stderr).
GpuCaps gpu_caps(const mlx::core::Device& device);

// One variant of paged_prefill_wgmma.cu: its constants.
struct WgmmaVariant {
  mlx::core::Dtype dtype = mlx::core::bfloat16;
  int head_dim = 128;
  int key_tile = 128;
  int stages = 2;
  int warpgroups = 2;
  bool causal = false;
  int table = 0; // GpuTable
  int scale_bits = 0; // the float32 bit pattern of the scale's magnitude (SCALE_BITS)
  bool scale_negative = false; // its sign (SCALE_NEGATIVE)
  int producer_registers = 0; // PRODUCER_REGISTERS: 0, or a producer warpgroup's registers a thread
};

// Its name, which is also its entry point; std::invalid_argument for
// constants the kernel does not take.
std::string prefill_wgmma_name(const WgmmaVariant& variant);

// Its whole translation unit: the includes MLX's prelude gives its own
// kernels, the headers, and an extern "C" entry point named `name` whose
// parameters are what precompiled_cuda_kernel passes (the inputs, the
// output, then the ints batch, num_q_heads, num_queries, head_dim,
// num_pages, num_kv_heads, page_size, max_pages).
std::string prefill_wgmma_source(const std::string& name, const WgmmaVariant& variant);

// The variant compiled by NVRTC (nvrtc_compile.h): its name and image, the
// cubin for sm_90a (about half the PTX's size, and MLX copies and hashes the
// image at every call), or the PTX for compute_90a, which the driver compiles
// when MLX loads it, where PAGECHECK_WGMMA_IMAGE=ptx asks for it or this NVRTC
// gives no cubin. `format` says which ("cubin" or "ptx"). Compiled on first
// use, then cached for the process.
struct WgmmaKernel {
  std::string name;
  std::string image;
  std::string format;
};

// The image format asked for: PAGECHECK_WGMMA_IMAGE, "cubin" (the default,
// also when unset or empty) or "ptx"; std::invalid_argument naming any other
// value. Read at each first use of a variant.
std::string wgmma_image_format();

const WgmmaKernel& prefill_wgmma_kernel(const WgmmaVariant& variant);

// Where the kernels find pages and contexts (TABLE in ext/kernels/paged_common.cuh).
enum class GpuTable {
  kPaged = 0, // block_table and context_lens
  kDenseWithLens = 1, // K/V [B, H_kv, S, D] as page b of S slots; context_lens given
  kDenseFull = 2, // as above, every context S
};

// inputs: query, key_pages, value_pages, block_table, context_lens, scale
// (float32 scalar); for the dense tables block_table (and context_lens of
// kDenseFull) are int32 placeholders the kernels do not read. outputs as
// gpu_output_shapes (gpu_plan.h).
void eval_attention_gpu(
    const AttentionShape& shape,
    GpuTable table,
    const std::vector<mlx::core::array>& inputs,
    std::vector<mlx::core::array>& outputs,
    mlx::core::Stream stream);

} // namespace pagecheck
