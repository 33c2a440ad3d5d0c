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
constexpr int kMaxSplits = MAX_MERGED_SPLITS;
constexpr int kBlockCostPositions = 128;
constexpr int kMergeCostPositions = 256;
constexpr int kMergeCostPerSplitPositions = 32;
constexpr double kLoneBlockSlowdown = 1.2;
constexpr int kSmSharedBytes = 228 * 1024;
// Shared memory the runtime keeps per resident block; a block may use the rest.
constexpr int kBlockReservedSharedBytes = 1024;
constexpr int kBlockMaxSharedBytes = kSmSharedBytes - kBlockReservedSharedBytes;
constexpr int kSmRegisters = 65536;

constexpr int kDecodeMaxRows = 8;
constexpr int kDecodeMmaRows = 16;
constexpr int kDecodeStages = 3;
constexpr int kDecodeMmaStages = 3;
// A ring of fewer stages cannot copy one tile while the warps compute on another.
constexpr int kMinMmaStages = 2;
constexpr int kDecodeStepsPerTile = 4;
constexpr int kDecodeWarps = 4;
constexpr int kPrefillMmaRowTile = 64;
// The warpgroup prefill (paged_prefill_wgmma.cu): blocks of 2 warpgroups (128
// query rows, key tiles of 128) where pages hold whole tiles of 128 keys; else
// blocks of 3 (192 rows, key tiles of 64) where they fill every multiprocessor
// at least twice over, else of 2. Rings of 3 stages. On the H200 (bfloat16,
// H_q 32, H_kv 8, D 128): pages of 128, B 4 x L 2048 over 8192 ran in 1,971 us
// in 2-warpgroup blocks against 2,275 in 3, B 1 x L 512 over 4096 in 75 us
// against 123; pages of 16, where a tile's rows come from several pages, B 4
// took 3,146 us in 3-warpgroup blocks against 3,368 in 2 (more threads share
// the per-row page lookups), B 1 123 us in 2 against 173 in 3 (88 blocks
// leave 44 multiprocessors idle). ext/kernels/NOTES.md.
constexpr int kWgmmaRowsPerWarpgroup = 64;
constexpr int kWgmmaStages = 3;
// The warpgroup prefill's producer warpgroup, by default where pages hold whole key tiles of 128 and the
// blocks have two consumer warpgroups: a third warpgroup at this many registers copies every tile, the
// consumers only multiply. Where a tile spans pages (pages of 5 or 16) the producer's 128 threads resolve
// more pages a tile than the consumers' 256 did, and it loses; there the consumers copy their own tiles
// (ext/kernels/NOTES.md v40).
constexpr int kWgmmaProducerRegisters = 56;
constexpr int kWgmmaTallBlocksPerSm = 2;
constexpr int kWgmmaWideKeyTile = 128;
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

// SharedRows<HEAD_DIM, SWIZZLE>::STRIDE of paged_mma.cuh: a tensor-core
// ring's K/V rows, unpadded and swizzled at multiples of 64 elements, else
// padded (always where bulk copies fill the ring).
int mma_row_stride(int head_dim, bool swizzle) {
  return swizzle && head_dim % 64 == 0 ? head_dim : head_dim + 8;
}

// DecodeWalker<...>::Layout::SHARED_BYTES of paged_decode_walk.cuh and
// paged_decode_mma_walk.cuh: the staging ring or the merge region.
int decode_shared_bytes(int itemsize, int head_dim, int rows, bool tensor_cores, int mma_stages, bool swizzled_rows) {
  if (tensor_cores) {
    const int ring = kDecodeWarps * mma_stages * 2 * 16 * mma_row_stride(head_dim, swizzled_rows) * itemsize;
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

// Decode blocks one multiprocessor holds at once.
int resident_blocks(int shared_bytes, int registers) {
  const int by_shared = kSmSharedBytes / (shared_bytes + kBlockReservedSharedBytes);
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
// merge.
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

bool runs_decode_walk(GpuSchedule schedule) {
  switch (schedule) {
    case GpuSchedule::kDecode:
    case GpuSchedule::kSplitDecode:
      return true;
    case GpuSchedule::kPrefill:
    case GpuSchedule::kPrefillMma:
    case GpuSchedule::kPrefillWgmma:
      return false;
    default:
      throw std::logic_error("pagecheck: unknown GPU schedule");
  }
}

[[noreturn]] void throw_without_tensor_cores(const std::string& pin, mx::Dtype dtype, int head_dim, bool available) {
  ErrorText message;
  message << "pagecheck: " << pin << " needs the tensor-core kernels, which take bfloat16 or float16 and a head dim "
          << "that is a multiple of 16 up to " << kGpuMmaMaxHeadDim;
  if (available) {
    message << "; got " << dtype << " and D = " << head_dim;
  } else {
    message << ", and this build has none";
  }
  throw std::invalid_argument(message.str());
}

void check_pin_ranges(const GpuPlanPins& pins) {
  if (pins.warpgroups && (*pins.warpgroups < 1 || *pins.warpgroups > 3)) {
    ErrorText message;
    message << "pagecheck: warpgroups = " << *pins.warpgroups << " must be in 1..3";
    throw std::invalid_argument(message.str());
  }
  if (pins.producer_registers && *pins.producer_registers != 0 &&
      (*pins.producer_registers < 24 || *pins.producer_registers > 256 || *pins.producer_registers % 8 != 0)) {
    ErrorText message;
    message << "pagecheck: producer_registers = " << *pins.producer_registers
            << " must be 0 (no producer warpgroup) or a multiple of 8 in 24..256";
    throw std::invalid_argument(message.str());
  }
  if (pins.splits && (*pins.splits < 1 || *pins.splits > kMaxSplits)) {
    ErrorText message;
    message << "pagecheck: splits = " << *pins.splits << " must be in 1.." << kMaxSplits
            << " (the split decode's merge holds that many)";
    throw std::invalid_argument(message.str());
  }
  if (pins.mma_stages && *pins.mma_stages < kMinMmaStages) {
    ErrorText message;
    message << "pagecheck: mma_stages = " << *pins.mma_stages << " must be at least " << kMinMmaStages;
    throw std::invalid_argument(message.str());
  }
}

// The kernel family: the decode walk's, or the prefill kernel's, tensor cores
// or not. A pinned prefill schedule names it; otherwise the tensor_cores pin,
// or tensor cores wherever they take the call.
bool plan_tensor_cores(const GpuPlanPins& pins, mx::Dtype dtype, int head_dim, const GpuCaps& caps) {
  const bool takes = caps.tensor_cores && gpu_takes_tensor_cores(dtype, head_dim);
  if (pins.schedule && !runs_decode_walk(*pins.schedule)) {
    const bool mma = *pins.schedule != GpuSchedule::kPrefill;
    if (pins.tensor_cores && *pins.tensor_cores != mma) {
      ErrorText message;
      message << "pagecheck: tensor_cores = " << (*pins.tensor_cores ? "true" : "false")
              << " contradicts schedule = " << gpu_schedule_name(*pins.schedule);
      throw std::invalid_argument(message.str());
    }
    if (*pins.schedule == GpuSchedule::kPrefillMma && !takes) {
      throw_without_tensor_cores("schedule = paged_prefill_mma", dtype, head_dim, caps.tensor_cores);
    }
    if (*pins.schedule == GpuSchedule::kPrefillWgmma &&
        !(caps.warpgroup_mma && gpu_takes_warpgroup_mma(dtype, head_dim))) {
      ErrorText message;
      message << "pagecheck: schedule = paged_prefill_wgmma needs warpgroup MMA (compute capability 9.0), "
              << "bfloat16 or float16, and D = 64 or 128";
      if (caps.warpgroup_mma) {
        message << "; got " << dtype << " and D = " << head_dim;
      } else {
        message << ", and this device has no warpgroup MMA";
      }
      throw std::invalid_argument(message.str());
    }
    return mma;
  }
  if (pins.tensor_cores.value_or(false) && !takes) {
    throw_without_tensor_cores("tensor_cores = true", dtype, head_dim, caps.tensor_cores);
  }
  return pins.tensor_cores.value_or(takes);
}

// Pins that only the decode walk has, on a plan that runs a prefill.
void check_prefill_pins(const GpuPlanPins& pins, GpuSchedule schedule) {
  const char* field = pins.splits ? "splits" : pins.mma_stages ? "mma_stages" : nullptr;
  if (field != nullptr) {
    ErrorText message;
    message << "pagecheck: " << field << " = " << (pins.splits ? *pins.splits : *pins.mma_stages)
            << " pins the decode walk, and this plan runs " << gpu_schedule_name(schedule);
    throw std::invalid_argument(message.str());
  }
}

// The warpgroups pin on a plan that does not run the warpgroup prefill (`runs`
// names what it runs instead).
void check_warpgroups_pin(const GpuPlanPins& pins, const char* runs) {
  const char* field = pins.warpgroups ? "warpgroups" : pins.producer_registers ? "producer_registers" : nullptr;
  if (field != nullptr) {
    ErrorText message;
    message << "pagecheck: " << field << " = " << (pins.warpgroups ? *pins.warpgroups : *pins.producer_registers)
            << " pins the warpgroup prefill, and this plan runs " << runs;
    throw std::invalid_argument(message.str());
  }
}

// Decode pins against each other: the split count against a pinned one-pass
// schedule, the ring depth against a walk on CUDA cores.
void check_decode_pins(const GpuPlanPins& pins, bool tensor_cores) {
  if (pins.splits && *pins.splits > 1 && pins.schedule == GpuSchedule::kDecode) {
    ErrorText message;
    message << "pagecheck: splits = " << *pins.splits << " needs schedule = "
            << gpu_schedule_name(GpuSchedule::kSplitDecode) << "; " << gpu_schedule_name(GpuSchedule::kDecode)
            << " walks each context in one pass";
    throw std::invalid_argument(message.str());
  }
  if (pins.mma_stages && !tensor_cores) {
    ErrorText message;
    message << "pagecheck: mma_stages = " << *pins.mma_stages
            << " sizes the tensor-core walk's ring, and this plan walks on CUDA cores";
    throw std::invalid_argument(message.str());
  }
}

} // namespace

bool gpu_takes_tensor_cores(mx::Dtype dtype, int head_dim) {
  return (dtype == mx::bfloat16 || dtype == mx::float16) && head_dim % 16 == 0 && head_dim <= kGpuMmaMaxHeadDim;
}

bool gpu_takes_warpgroup_mma(mx::Dtype dtype, int head_dim) {
  return (dtype == mx::bfloat16 || dtype == mx::float16) && (head_dim == 64 || head_dim == 128);
}

int gpu_decode_shared_bytes(mx::Dtype dtype, int head_dim, int rows, bool tensor_cores, int mma_stages,
                            bool swizzled_rows) {
  return decode_shared_bytes(static_cast<int>(mx::size_of(dtype)), head_dim, rows, tensor_cores, mma_stages,
                             swizzled_rows);
}

// As ptxas reports them (python -m pagecheck.gpu.nvcc_check, which a test
// holds to these figures): the tensor-core walk's 222-225, rounded up to the
// allocation unit of 8 (NVRTC on the H200 gave 217).
int gpu_walk_registers(bool tensor_cores, int rows) {
  if (tensor_cores) {
    return 232;
  }
  return rows <= 4 ? 128 : 255;
}

std::vector<std::pair<const char*, int>> gpu_plan_constants() {
  return {
      {"threads_per_block", kGpuThreadsPerBlock},
      {"decode_max_query_len", kDecodeMaxQueryLen},
      {"max_head_dim", kMaxHeadDim},
      {"mma_max_head_dim", kGpuMmaMaxHeadDim},
      {"min_split_positions", kMinSplitPositions},
      {"max_splits", kMaxSplits},
      {"decode_mma_rows", kDecodeMmaRows},
      {"decode_mma_stages", kDecodeMmaStages},
      {"min_mma_stages", kMinMmaStages},
  };
}

GpuSchedule gpu_schedule_named(const std::string& name) {
  constexpr GpuSchedule kSchedules[] = {
      GpuSchedule::kDecode, GpuSchedule::kSplitDecode, GpuSchedule::kPrefill, GpuSchedule::kPrefillMma,
      GpuSchedule::kPrefillWgmma};
  ErrorText names;
  for (const GpuSchedule schedule : kSchedules) {
    if (name == gpu_schedule_name(schedule)) {
      return schedule;
    }
    names << (schedule == kSchedules[0] ? "" : ", ") << gpu_schedule_name(schedule);
  }
  ErrorText message;
  message << "pagecheck: schedule = " << name << " is not one of " << names.str();
  throw std::invalid_argument(message.str());
}

void check_gpu_shape(const AttentionShape& shape) {
  if (shape.head_dim > kMaxHeadDim) {
    ErrorText message;
    message << "pagecheck: head dim D = " << shape.head_dim << " is above the GPU kernels' limit "
            << kMaxHeadDim << "; run on the CPU stream";
    throw std::invalid_argument(message.str());
  }
}

GpuPlan plan_gpu_call(
    const AttentionShape& shape,
    mx::Dtype dtype,
    const GpuCaps& caps,
    const GpuPlanPins& pins) {
  check_pin_ranges(pins);
  GpuPlan plan;
  const int group_rows = shape.group_size() * shape.query_len;
  const bool mma = plan_tensor_cores(pins, dtype, shape.head_dim, caps);
  const int itemsize = static_cast<int>(mx::size_of(dtype));
  const bool decode = pins.schedule ? runs_decode_walk(*pins.schedule) : shape.query_len <= kDecodeMaxQueryLen;
  if (decode) {
    check_warpgroups_pin(pins, "a decode walk");
    check_decode_pins(pins, mma);
    plan.tensor_cores = mma;
    plan.mma_stages = pins.mma_stages.value_or(kDecodeMmaStages);
    plan.bulk = pins.bulk && mma;
    plan.rows = mma ? kDecodeMmaRows : std::min(next_pow2(group_rows), kDecodeMaxRows);
    plan.blocks = static_cast<int64_t>(shape.batch) * shape.num_kv_heads * ceil_div(group_rows, plan.rows);
    if (pins.splits) {
      plan.splits = *pins.splits;
    } else if (pins.schedule == GpuSchedule::kDecode) {
      plan.splits = 1;
    } else {
      // Residency by the padded ring, which is never smaller (both layouts
      // hold two tensor-core blocks per multiprocessor at the benchmark's
      // shapes).
      const int resident =
          resident_blocks(decode_shared_bytes(itemsize, shape.head_dim, plan.rows, mma, plan.mma_stages, false),
                          gpu_walk_registers(mma, plan.rows));
      plan.splits = choose_splits(plan.blocks, static_cast<int64_t>(shape.pages_per_request) * shape.page_size,
                                  resident);
    }
    plan.swizzled_rows = mma && !plan.bulk && plan.blocks * plan.splits > kSmCount;
    plan.shared_bytes =
        decode_shared_bytes(itemsize, shape.head_dim, plan.rows, mma, plan.mma_stages, plan.swizzled_rows);
    if (pins.mma_stages && plan.shared_bytes > kBlockMaxSharedBytes) {
      ErrorText message;
      message << "pagecheck: mma_stages = " << *pins.mma_stages << " needs " << plan.shared_bytes
              << " bytes of shared memory per block, above the " << kBlockMaxSharedBytes << " a block may use";
      throw std::invalid_argument(message.str());
    }
    plan.schedule = pins.schedule.value_or(plan.splits > 1 ? GpuSchedule::kSplitDecode : GpuSchedule::kDecode);
    if (plan.schedule == GpuSchedule::kSplitDecode) {
      const int64_t rows = static_cast<int64_t>(shape.batch) * shape.num_q_heads * shape.query_len;
      const SplitScratch scratch = split_scratch(rows, plan.splits, shape.head_dim, plan.blocks, itemsize);
      plan.scratch_words = scratch.total_words;
      plan.out_begin_words = scratch.out_begin;
    }
  } else {
    const bool wgmma = mma && caps.warpgroup_mma && gpu_takes_warpgroup_mma(dtype, shape.head_dim);
    plan.schedule = pins.schedule.value_or(wgmma ? GpuSchedule::kPrefillWgmma
                                                 : mma ? GpuSchedule::kPrefillMma : GpuSchedule::kPrefill);
    check_prefill_pins(pins, plan.schedule);
    if (plan.schedule != GpuSchedule::kPrefillWgmma) {
      check_warpgroups_pin(pins, gpu_schedule_name(plan.schedule));
    }
    const int64_t heads = static_cast<int64_t>(shape.batch) * shape.num_kv_heads;
    if (plan.schedule == GpuSchedule::kPrefillWgmma) {
      const int64_t tall_blocks = heads * ceil_div(group_rows, 3 * kWgmmaRowsPerWarpgroup);
      const bool whole_tiles = shape.page_size % kWgmmaWideKeyTile == 0;
      plan.warpgroups =
          pins.warpgroups.value_or(!whole_tiles && tall_blocks >= kWgmmaTallBlocksPerSm * kSmCount ? 3 : 2);
      plan.key_tile = plan.warpgroups == 3 ? 64 : kWgmmaWideKeyTile;
      plan.mma_stages = kWgmmaStages;
      plan.producer_registers =
          pins.producer_registers.value_or(whole_tiles && plan.warpgroups == 2 ? kWgmmaProducerRegisters : 0);
      plan.threads = (plan.warpgroups + (plan.producer_registers > 0 ? 1 : 0)) * kGpuWarpgroupThreads;
      plan.blocks = heads * ceil_div(group_rows, plan.warpgroups * kWgmmaRowsPerWarpgroup);
      // The ring's K and V stages, each warpgroup's 64 query rows, a full and a free barrier per stage, and 1024
      // bytes to align the ring to a swizzle line group.
      plan.shared_bytes = (2 * plan.mma_stages * plan.key_tile + plan.warpgroups * kWgmmaRowsPerWarpgroup) *
              shape.head_dim * itemsize +
          2 * plan.mma_stages * 8 + 1024;
    } else if (plan.schedule == GpuSchedule::kPrefillMma) {
      plan.blocks = heads * ceil_div(group_rows, kPrefillMmaRowTile);
      // Key tiles are positions, not pages (copy_position_rows), so every page size takes 64.
      plan.key_tile = 64;
      plan.shared_bytes = 4 * plan.key_tile * mma_row_stride(shape.head_dim, false) * itemsize;
    } else {
      plan.blocks = heads * ceil_div(group_rows, kPrefillRowTile);
      const int stride = shape.head_dim % 2 == 0 ? shape.head_dim + 1 : shape.head_dim;
      plan.shared_bytes = 4 * (96 * stride + 32 * shape.head_dim + 64 * 33);
    }
  }
  if (plan.blocks * plan.threads > INT_MAX || plan.scratch_words > INT_MAX) {
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
    case GpuSchedule::kPrefillWgmma:
      return "paged_prefill_wgmma";
    default:
      throw std::logic_error("pagecheck: unknown GPU schedule");
  }
}

std::vector<mx::Shape> gpu_output_shapes(const AttentionShape& shape, const GpuPlan& plan) {
  const mx::Shape out{shape.batch, shape.num_q_heads, shape.query_len, shape.head_dim};
  return {out, mx::Shape{static_cast<int>(plan.scratch_words)}};
}

std::vector<mx::Dtype> gpu_output_dtypes(mx::Dtype dtype) {
  return {dtype, mx::float32};
}

} // namespace pagecheck
