#include "common/gpu_plan.h"

#include <algorithm>
#include <climits>
#include <sstream>
#include <stdexcept>

namespace pagecheck {

namespace mx = mlx::core;

namespace {

// Split rule: an H200 has 132 multiprocessors and keeps about four decode
// blocks resident on each; below two blocks per multiprocessor the context is
// split until there are about four, with at least kMinSplitPositions
// positions of capacity per split.
constexpr int kSmCount = 132;
constexpr int kSplitBelowBlocks = 2 * kSmCount;
constexpr int kSplitTargetBlocks = 4 * kSmCount;
constexpr int kMinSplitPositions = 256;

constexpr int kDecodeMaxRows = 8;
constexpr int kDecodeMmaRows = 16;
constexpr int kDecodeStages = 3;
constexpr int kDecodeMmaStages = 2;
constexpr int kDecodeStepsPerTile = 4;
constexpr int kDecodeWarps = 4;
constexpr int kPrefillRowTile = 64;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

int next_pow2(int x) {
  int p = 1;
  while (p < x) {
    p *= 2;
  }
  return p;
}

bool takes_mma(mx::Dtype dtype, int head_dim) {
  return (dtype == mx::bfloat16 || dtype == mx::float16) && head_dim % 16 == 0 && head_dim <= kGpuMmaMaxHeadDim;
}

// DecodeWalker<...>::Layout::SHARED_BYTES of paged_decode_walk.cuh and
// paged_decode_mma_walk.cuh: the staging ring or the merge region.
int decode_shared_bytes(int itemsize, int head_dim, int rows, bool tensor_cores) {
  if (tensor_cores) {
    const int ring = kDecodeWarps * kDecodeMmaStages * 2 * 16 * (head_dim + 8) * itemsize;
    return std::max(ring, kDecodeWarps * rows * (head_dim + 2) * 4);
  }
  const int vec = 16 / itemsize;
  const int num_vecs = static_cast<int>(ceil_div(head_dim, vec));
  const int vecs_per_lane = static_cast<int>(ceil_div(num_vecs, 32));
  const int lanes_per_token = next_pow2(static_cast<int>(ceil_div(num_vecs, vecs_per_lane)));
  const int tile_tokens = (32 / lanes_per_token) * kDecodeStepsPerTile;
  const int ring = kDecodeWarps * kDecodeStages * 2 * tile_tokens * num_vecs * vec * itemsize;
  const int merge = kDecodeWarps * rows * (lanes_per_token * vecs_per_lane * vec + 2) * 4;
  return std::max(ring, merge);
}

int choose_splits(int64_t blocks, int64_t capacity) {
  if (blocks >= kSplitBelowBlocks) {
    return 1;
  }
  const int64_t wanted = ceil_div(kSplitTargetBlocks, blocks);
  return static_cast<int>(std::max<int64_t>(1, std::min(wanted, capacity / kMinSplitPositions)));
}

} // namespace

void check_gpu_shape(const AttentionShape& shape) {
  if (shape.head_dim > kGpuMaxHeadDim) {
    std::ostringstream message;
    message << "pagecheck: head dim D = " << shape.head_dim << " is above the GPU kernels' limit "
            << kGpuMaxHeadDim << "; run on the CPU stream";
    throw std::invalid_argument(message.str());
  }
}

GpuPlan plan_gpu_call(const AttentionShape& shape, mx::Dtype dtype, bool tensor_cores_available) {
  GpuPlan plan;
  const int group_rows = shape.group_size() * shape.query_len;
  const bool mma = tensor_cores_available && takes_mma(dtype, shape.head_dim);
  const int itemsize = static_cast<int>(mx::size_of(dtype));
  if (shape.query_len <= kDecodeMaxQueryLen) {
    plan.tensor_cores = mma;
    plan.rows = mma ? kDecodeMmaRows : std::min(next_pow2(group_rows), kDecodeMaxRows);
    plan.blocks = static_cast<int64_t>(shape.batch) * shape.num_kv_heads * ceil_div(group_rows, plan.rows);
    plan.splits = choose_splits(plan.blocks, static_cast<int64_t>(shape.pages_per_request) * shape.page_size);
    plan.schedule = plan.splits > 1 ? GpuSchedule::kSplitDecode : GpuSchedule::kDecode;
    plan.shared_bytes = decode_shared_bytes(itemsize, shape.head_dim, plan.rows, mma);
    if (plan.splits > 1) {
      plan.scratch_rows = static_cast<int64_t>(shape.batch) * shape.num_q_heads * shape.query_len;
    }
  } else {
    plan.blocks = static_cast<int64_t>(shape.batch) * shape.num_kv_heads * ceil_div(group_rows, kPrefillRowTile);
    if (mma) {
      plan.schedule = GpuSchedule::kPrefillMma;
      plan.key_tile = shape.page_size >= 64 ? 64 : shape.page_size >= 32 ? 32 : 16;
      plan.shared_bytes = 4 * plan.key_tile * (shape.head_dim + 8) * itemsize;
    } else {
      plan.schedule = GpuSchedule::kPrefill;
      const int stride = shape.head_dim % 2 == 0 ? shape.head_dim + 1 : shape.head_dim;
      plan.shared_bytes = 4 * (96 * stride + 32 * shape.head_dim + 64 * 33);
    }
  }
  if (plan.blocks * kGpuThreadsPerBlock > INT_MAX) {
    throw std::invalid_argument("pagecheck: the GPU launch for this shape exceeds the int32 grid range");
  }
  return plan;
}

const char* gpu_schedule_name(GpuSchedule schedule) {
  switch (schedule) {
    case GpuSchedule::kDecode:
      return "paged_decode";
    case GpuSchedule::kSplitDecode:
      return "paged_decode_split";
    case GpuSchedule::kPrefill:
      return "paged_prefill";
    case GpuSchedule::kPrefillMma:
      return "paged_prefill_mma";
  }
  throw std::logic_error("pagecheck: unknown GPU schedule");
}

std::vector<mx::Shape> gpu_output_shapes(const AttentionShape& shape, const GpuPlan& plan) {
  const mx::Shape out{shape.batch, shape.num_q_heads, shape.query_len, shape.head_dim};
  if (plan.scratch_rows == 0) {
    return {out, mx::Shape{0}, mx::Shape{0}};
  }
  const int rows = static_cast<int>(plan.scratch_rows);
  return {out, mx::Shape{rows, plan.splits, shape.head_dim}, mx::Shape{rows, plan.splits, 2}};
}

std::vector<mx::Dtype> gpu_output_dtypes(mx::Dtype dtype) {
  return {dtype, mx::float32, mx::float32};
}

} // namespace pagecheck
