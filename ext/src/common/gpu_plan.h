// Which GPU kernels one attention call runs, and their launch geometry.
//
// Chosen from shapes and dtype only, never from values, so the op knows at
// graph-construction time which outputs the call has (the split-decode
// scratch is an output of the primitive, which keeps it alive until the
// kernels that read it have run). The rules and layouts are those of the
// kernels in ext/kernels/ (see each kernel's comment). This is the one
// planner: the Python launcher pagecheck/gpu/kernels.py, which drives the
// same files one schedule at a time, asks it through the binding
// (pagecheck.ext.gpu_launch_plan), with pins where a sweep or a check fixes a
// choice the automatic plan would not take.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/attention_shape.h"
#include "mlx/array.h"
#include "paged_decode_split_scratch.cuh"

namespace pagecheck {

constexpr int kGpuThreadsPerBlock = 128;
// Threads of a warpgroup (4 warps), the unit the warpgroup prefill's blocks come in.
constexpr int kGpuWarpgroupThreads = 128;
// Largest head dim the CUDA kernels take (register and shared-memory budgets);
// the Metal mirrors take up to 128 (32 KB of threadgroup memory).
constexpr int kGpuMaxHeadDim = 256;
// Tensor-core kernels: bfloat16/float16, head dims multiple of 16 up to this.
constexpr int kGpuMmaMaxHeadDim = 128;

enum class GpuSchedule { kDecode, kSplitDecode, kPrefill, kPrefillMma, kPrefillWgmma };

// What the device and build offer: tensor cores through mma.sync (any CUDA
// build; not the Metal mirrors), and Hopper's warpgroup MMA (wgmma, compute
// capability 9.0 exactly: sm_90a code runs on no other).
struct GpuCaps {
  bool tensor_cores = false;
  bool warpgroup_mma = false;
};

// Choices a caller fixes instead of leaving them to the plan; the op pins
// nothing. plan_gpu_call throws std::invalid_argument, naming the pin and its
// value, for a pin out of range, one the shape or dtype cannot take, or one
// that contradicts another.
struct GpuPlanPins {
  // Any schedule for any query length (a decode schedule for L > 8 too).
  std::optional<GpuSchedule> schedule;
  // Context splits, 1..MAX_MERGED_SPLITS; more than 1 only where the split
  // decode runs. Decode schedules only.
  std::optional<int> splits;
  // The decode walk (true: the tensor-core walk), or the prefill kernel when
  // the schedule is not pinned (true: the warpgroup prefill where the device
  // has it, else the mma.sync one).
  std::optional<bool> tensor_cores;
  // Ring stages of the tensor-core decode walk, at least 2, its ring within
  // a block's shared memory. That walk only.
  std::optional<int> mma_stages;
  // Warpgroups per block of the warpgroup prefill, 1..3 (its key tile follows:
  // 64 for 3, else 128). That prefill only.
  std::optional<int> warpgroups;
  // Registers a thread of the warpgroup prefill's producer warpgroup keeps (0:
  // no producer, every thread copies; else a multiple of 8 in 24..256, and
  // the consumers share the rest). That prefill only.
  std::optional<int> producer_registers;
  // The tensor-core ring filled by bulk (TMA) copies, sm_90+, rows padded.
  // A request: honoured where the tensor-core decode walk runs, dropped
  // elsewhere (GpuPlan::bulk says which).
  bool bulk = false;
};

struct GpuPlan {
  GpuSchedule schedule = GpuSchedule::kDecode;
  bool tensor_cores = false; // decode walk (prefill: the schedule says)
  int rows = 0; // query rows per decode block
  int mma_stages = 3; // ring stages of the tensor-core decode walk
  bool bulk = false; // that ring filled by bulk copies instead of cp.async
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
  int key_tile = 0; // key tile of the tensor-core prefills
  int threads = kGpuThreadsPerBlock; // threads per block
  // Warpgroups (128 threads, 64 query rows each) per block of the warpgroup
  // prefill; its ring depth is mma_stages.
  int warpgroups = 0;
  // Registers of its producer warpgroup's threads, 0 for none (threads counts
  // the producer's 128 with the consumers').
  int producer_registers = 0;
  // The split scratch (split_scratch of paged_decode_split_scratch.cuh, the
  // kernel's own layout): its float32 words, 0 unless split, and where the
  // output starts inside it.
  int64_t scratch_words = 0;
  int64_t out_begin_words = 0;
};

GpuPlan plan_gpu_call(
    const AttentionShape& shape,
    mlx::core::Dtype dtype,
    const GpuCaps& caps,
    const GpuPlanPins& pins = {});

// The kernel's stem ("paged_decode"), and back; an unknown name throws
// std::invalid_argument that lists the names.
const char* gpu_schedule_name(GpuSchedule schedule);
GpuSchedule gpu_schedule_named(const std::string& name);

// Whether the tensor-core kernels take this dtype and head dim.
bool gpu_takes_tensor_cores(mlx::core::Dtype dtype, int head_dim);

// Whether the warpgroup prefill takes this dtype and head dim (64 or 128: its
// shared tiles are whole 128-byte swizzle lines).
bool gpu_takes_warpgroup_mma(mlx::core::Dtype dtype, int head_dim);

// Dynamic shared memory of a decode walk (DecodeWalker<...>::Layout::
// SHARED_BYTES): its staging ring or its merge region, whichever is larger.
int gpu_decode_shared_bytes(
    mlx::core::Dtype dtype,
    int head_dim,
    int rows,
    bool tensor_cores,
    int mma_stages,
    bool swizzled_rows);

// Registers per thread of a decode walk at most, as the split rule counts them.
int gpu_walk_registers(bool tensor_cores, int rows);

// The planner's constants that the Python tools use, by name
// (pagecheck.ext.gpu_plan_constants()).
std::vector<std::pair<const char*, int>> gpu_plan_constants();

// The outputs of a GPU call: the attention output, then the split-decode
// scratch, float32 [scratch_words] (zero-sized when the plan does not split;
// when it does, the attention output is a view of the scratch's out region).
std::vector<mlx::core::Shape> gpu_output_shapes(const AttentionShape& shape, const GpuPlan& plan);
std::vector<mlx::core::Dtype> gpu_output_dtypes(mlx::core::Dtype dtype);

// Throws std::invalid_argument for shapes the GPU kernels do not take.
void check_gpu_shape(const AttentionShape& shape);

} // namespace pagecheck
