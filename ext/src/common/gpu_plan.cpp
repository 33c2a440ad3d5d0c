#include "common/gpu_plan.h"

#include <algorithm>
#include <climits>
#include <stdexcept>

#include "common/error_text.h"

namespace pagecheck {

namespace mx = mlx::core;

namespace {

// Split rule (choose_splits): an H200 has 132 multiprocessors; a split covers
// at least kMinSplitPositions positions of the table's capacity; a block's
// fixed cost and the merge of the splits count as that many positions of
// work: a fixed part, and a part per split (the last block of a column reads
// every split's partial); a multiprocessor that runs one block at a time
// walks kLoneBlockSlowdown times slower per position. All from the H200, GPU
// clock (ext/kernels/NOTES.md): a multiprocessor walks 0.0142
// us per position with two blocks at once (B 64 x 4096 in 248 us, B 64 x
// 16384 in 947), 0.0170 alone (B 16 x 4096 unsplit in 75.4 us, x 16384 in
// 285): 1.2 times slower; two splits cost about 2 us more than one pass over
// the same positions per multiprocessor (B 16 x 16384 in two splits 250 us
// against B 64 x 4096 unsplit 248). B 1 x 16384 ran fastest in 16 splits
// (43.0 us against 44.3-44.7 in 20-33 and 47.7 in 12), B 2 x
// 16384 in 16 (51.3 us) rather than 8 (56.8), which bounds the part per split.
constexpr int kSmCount = 132;
constexpr int kMinSplitPositions = 256;
constexpr int kMaxSplits = 64;
constexpr int kBlockCostPositions = 128;
constexpr int kMergeCostPositions = 256;
constexpr int kMergeCostPerSplitPositions = 32;
constexpr double kLoneBlockSlowdown = 1.2;
constexpr int kSmSharedBytes = 228 * 1024;
constexpr int kSmRegisters = 65536;

constexpr int kDecodeMaxRows = 8;
constexpr int kDecodeMmaRows = 16;
constexpr int kDecodeStages = 3;
constexpr int kDecodeMmaStages = 3;
constexpr int kDecodeStepsPerTile = 4;
constexpr int kDecodeWarps = 4;
constexpr int kPrefillMmaRowTile = 64;
// The CUDA-core prefill takes 64 query rows per block; its Metal mirror 16,
// because a threadgroup has 32 KB of memory on Apple GPUs.
#ifdef __APPLE__
constexpr int kPrefillRowTile = 16;
constexpr int kMaxHeadDim = 128;
#else
constexpr int kPrefillRowTile = 64;
constexpr int kMaxHeadDim = kGpuMaxHeadDim;
#endif

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

// SharedRows<HEAD_DIM, SWIZZLE>::STRIDE of paged_mma.cuh: a tensor-core
// ring's K/V rows, unpadded and swizzled at multiples of 64 elements, else
// padded. (The op never fills a ring by bulk copies, which need padding.)
int mma_row_stride(int head_dim, bool swizzle) {
  return swizzle && head_dim % 64 == 0 ? head_dim : head_dim + 8;
}

// DecodeWalker<...>::Layout::SHARED_BYTES of paged_decode_walk.cuh and
// paged_decode_mma_walk.cuh: the staging ring or the merge region.
int decode_shared_bytes(int itemsize, int head_dim, int rows, bool tensor_cores, bool swizzled_rows) {
  if (tensor_cores) {
    const int ring = kDecodeWarps * kDecodeMmaStages * 2 * 16 * mma_row_stride(head_dim, swizzled_rows) * itemsize;
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

// Registers per thread of the decode walks at most, as ptxas reports them
// (python -m pagecheck.gpu_nvcc_check, which a test holds to these figures):
// the tensor-core walk's 222-225, rounded up to the allocation unit of 8
// (NVRTC on the H200 gave 217).
int walk_registers(bool tensor_cores, int rows) {
  if (tensor_cores) {
    return 232;
  }
  return rows <= 4 ? 128 : 255;
}

// Decode blocks one multiprocessor holds at once.
int resident_blocks(int shared_bytes, int registers) {
  const int by_shared = kSmSharedBytes / (shared_bytes + 1024);
  const int by_registers = kSmRegisters / (registers * kGpuThreadsPerBlock);
  return std::max(1, std::min(by_shared, by_registers));
}

// The blocks spread over kSmCount multiprocessors, so the busiest one walks
// k = ceil(blocks x splits / kSmCount) of them: k x (positions per block + a
// block's fixed cost). Running two blocks or more at once it is bound by
// memory; running one at a time (k == 1, or one resident) it is bound by
// instruction latency, one warp per scheduler, and each position costs
// kLoneBlockSlowdown times more. Splitting adds the merge. The count
// minimising that total fills an under-occupied GPU, and doubles a grid of one
// block per multiprocessor only when its context is long enough to repay the
// merge. (gpu_kernels.choose_splits mirrors this expression for expression,
// so both round alike.)
int choose_splits(int64_t blocks, int64_t capacity, int resident) {
  const int most = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(kMaxSplits, capacity / kMinSplitPositions)));
  int best = 1;
  double best_cost = 0.0;
  for (int splits = 1; splits <= most; ++splits) {
    const int64_t per_sm = ceil_div(blocks * splits, static_cast<int64_t>(kSmCount));
    double walk = static_cast<double>(per_sm) * (static_cast<double>(capacity) / splits + kBlockCostPositions);
    if (std::min<int64_t>(per_sm, resident) == 1) {
      walk *= kLoneBlockSlowdown;
    }
    const double merge =
        splits > 1 ? kMergeCostPositions + static_cast<double>(kMergeCostPerSplitPositions) * splits : 0.0;
    const double cost = walk + merge;
    if (splits == 1 || cost < best_cost) {
      best = splits;
      best_cost = cost;
    }
  }
  return best;
}

} // namespace

void check_gpu_shape(const AttentionShape& shape) {
  if (shape.head_dim > kMaxHeadDim) {
    ErrorText message;
    message << "pagecheck: head dim D = " << shape.head_dim << " is above the GPU kernels' limit "
            << kMaxHeadDim << "; run on the CPU stream";
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
    plan.mma_stages = kDecodeMmaStages;
    plan.rows = mma ? kDecodeMmaRows : std::min(next_pow2(group_rows), kDecodeMaxRows);
    plan.blocks = static_cast<int64_t>(shape.batch) * shape.num_kv_heads * ceil_div(group_rows, plan.rows);
    // Residency by the padded ring, which is never smaller (both layouts hold
    // two tensor-core blocks per multiprocessor at the benchmark's shapes).
    const int resident = resident_blocks(decode_shared_bytes(itemsize, shape.head_dim, plan.rows, mma, false),
                                         walk_registers(mma, plan.rows));
    plan.splits = choose_splits(plan.blocks, static_cast<int64_t>(shape.pages_per_request) * shape.page_size,
                                resident);
    plan.swizzled_rows = mma && plan.blocks * plan.splits > kSmCount;
    plan.shared_bytes = decode_shared_bytes(itemsize, shape.head_dim, plan.rows, mma, plan.swizzled_rows);
    plan.schedule = plan.splits > 1 ? GpuSchedule::kSplitDecode : GpuSchedule::kDecode;
    if (plan.splits > 1) {
      const int64_t rows = static_cast<int64_t>(shape.batch) * shape.num_q_heads * shape.query_len;
      const SplitScratch scratch = split_scratch(rows, plan.splits, shape.head_dim, plan.blocks, itemsize);
      plan.scratch_words = scratch.total_words;
      plan.out_begin_words = scratch.out_begin;
    }
  } else {
    const int row_tile = mma ? kPrefillMmaRowTile : kPrefillRowTile;
    plan.blocks = static_cast<int64_t>(shape.batch) * shape.num_kv_heads * ceil_div(group_rows, row_tile);
    if (mma) {
      plan.schedule = GpuSchedule::kPrefillMma;
      plan.key_tile = shape.page_size >= 64 ? 64 : shape.page_size >= 32 ? 32 : 16;
      plan.shared_bytes = 4 * plan.key_tile * mma_row_stride(shape.head_dim, false) * itemsize;
    } else {
      plan.schedule = GpuSchedule::kPrefill;
      const int stride = shape.head_dim % 2 == 0 ? shape.head_dim + 1 : shape.head_dim;
      plan.shared_bytes = 4 * (96 * stride + 32 * shape.head_dim + 64 * 33);
    }
  }
  if (plan.blocks * kGpuThreadsPerBlock > INT_MAX || plan.scratch_words > INT_MAX) {
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
  return {out, mx::Shape{static_cast<int>(plan.scratch_words)}};
}

std::vector<mx::Dtype> gpu_output_dtypes(mx::Dtype dtype) {
  return {dtype, mx::float32};
}

} // namespace pagecheck
