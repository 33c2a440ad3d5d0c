// Which GPU kernels one attention call runs, and their launch geometry.
//
// Chosen from shapes and dtype only, never from values, so the op knows at
// graph-construction time which outputs the call has (the split-decode
// scratch is an output of the primitive, which keeps it alive until the
// kernels that read it have run). The rules and layouts are those of the
// kernels in ext/kernels/ (see each kernel's comment) and of the Python
// launcher pagecheck/gpu_kernels.py, which drives the same files.
#pragma once

#include <cstdint>
#include <vector>

#include "common/attention_shape.h"
#include "mlx/array.h"
#include "paged_decode_split_scratch.cuh"

namespace pagecheck {

constexpr int kGpuThreadsPerBlock = 128;
// Largest head dim the CUDA kernels take (register and shared-memory budgets);
// the Metal mirrors take up to 128 (32 KB of threadgroup memory).
constexpr int kGpuMaxHeadDim = 256;
// Tensor-core kernels: bfloat16/float16, head dims multiple of 16 up to this.
constexpr int kGpuMmaMaxHeadDim = 128;

enum class GpuSchedule { kDecode, kSplitDecode, kPrefill, kPrefillMma };

struct GpuPlan {
  GpuSchedule schedule = GpuSchedule::kDecode;
  bool tensor_cores = false; // decode walk (prefill: the schedule says)
  int rows = 0; // query rows per decode block
  int mma_stages = 3; // ring stages of the tensor-core decode walk
  // The tensor-core ring's rows swizzled instead of padded (SharedRows in
  // paged_mma.cuh) wherever multiprocessors hold two blocks or more: there
  // the walk is bound by memory and swizzled rows, asking L2 for a third
  // fewer sectors, stream faster (H200: B 16 x 16384 in 2 splits 266 -> 250
  // us, B 64 x 4096 261 -> 248). A grid of at most one block per
  // multiprocessor (B 1 in 16 splits, B 16 x 1024) has one warp per
  // scheduler and is bound by instruction latency instead, where the
  // swizzled walk's extra address instructions cost (36.0 -> 39.9 us,
  // 23.5 -> 24.9 us; ext/kernels/NOTES.md).
  bool swizzled_rows = false;
  int64_t blocks = 0; // thread blocks along grid x
  int splits = 1; // context splits of the split decode
  int shared_bytes = 0; // dynamic shared memory of the main kernel
  int key_tile = 0; // key tile of the tensor-core prefill
  // The split scratch (split_scratch of paged_decode_split_scratch.cuh, the
  // kernel's own layout): its float32 words, 0 unless split, and where the
  // output starts inside it.
  int64_t scratch_words = 0;
  int64_t out_begin_words = 0;
};

// `tensor_cores_available`: false where no mma kernels exist (Metal).
GpuPlan plan_gpu_call(const AttentionShape& shape, mlx::core::Dtype dtype, bool tensor_cores_available);

const char* gpu_schedule_name(GpuSchedule schedule);

// The outputs of a GPU call: the attention output, then the split-decode
// scratch, float32 [scratch_words] (zero-sized when the plan does not split;
// when it does, the attention output is a view of the scratch's out region).
std::vector<mlx::core::Shape> gpu_output_shapes(const AttentionShape& shape, const GpuPlan& plan);
std::vector<mlx::core::Dtype> gpu_output_dtypes(mlx::core::Dtype dtype);

// Throws std::invalid_argument for shapes the GPU kernels do not take.
void check_gpu_shape(const AttentionShape& shape);

} // namespace pagecheck
