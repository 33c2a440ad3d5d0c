// decode_split_probe: the split decode (paged_decode_split.cu, tensor-core
// walk) as a standalone CUDA program, for tuning its plan without the
// extension; split count 0 runs the single-pass decode (paged_decode.cu) on
// the same walk. Each variant (ring stages) runs at every split count given, on
// one paged layout (probe_layout.h: shuffled pages, NaN in every unused
// slot), is checked against a float64 host reference, timed with CUDA events,
// and run a second time to be compared bit for bit. bfloat16, D 128, L 1,
// scale 1 / sqrt(D), through the block table.
//
// Two times per line:
// - `kernel`: the mean of events around each launch. Before each, outside the
//   events, a memset of the scratch's counters and a pass over a buffer twice
//   the L2's size, so that no launch finds K/V in L2. The events also hold the
//   launch: a few us more than the kernel's own duration in Nsight Compute.
//   PAGECHECK_PROBE_FLUSH picks the pass: `write` (default) a memset, which
//   leaves the L2 full of lines the launch must write back as it evicts
//   them; `read` a kernel that reads the buffer, which leaves clean lines, as
//   a previous call's K/V reads leave them in a chain of calls.
// - `with fill`: back-to-back launches, each after a memset of the whole
//   scratch (what the op's fill does, as a memset rather than a kernel); K/V
//   that fit in L2 may stay there between launches.
//
// PAGECHECK_PROBE_TIMELINE=DIR adds, per split plan, one launch of the same
// body with each block's entry, walk end and exit read from the global timer:
// a TIMELINE summary line and DIR/timeline_*.csv (where a B 1 call's time goes
// between launch ramp, walk, ticket and merge).
//
// The block's warp count is the compile definition PAGECHECK_DECODE_WARPS
// (paged_decode_merge.cuh, default 4); the launch takes DECODE_THREADS.
//
//   nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -I ext/kernels \
//        [-DPAGECHECK_DECODE_WARPS=8] pagecheck/gpu/probes/decode_split_probe.cu -o decode_split_probe
//   ./decode_split_probe B H_Q H_KV CONTEXT PAGE SPLITS[,SPLITS...] [REPS] [VARIANT]
//
// The block table has one column more than the longest context needs (-1
// entries); PAGECHECK_PROBE_SPARE_PAGES=N sets how many (0: each row exactly
// its pages, as the op's benchmark builds it).
//
// `scripts/gpu_probe.sh decode` builds both block sizes and runs them at the
// decode benchmark's shapes.
// Exit status 0 when every run agreed with the reference and with itself, 2
// otherwise, 1 on bad arguments or a CUDA error.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda/std/limits>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <string>
#include "paged_common.cuh"
#include "paged_mma.cuh"
#include "paged_bulk_copy.cuh"
#include "paged_decode_merge.cuh"
#include "paged_decode_walk.cuh"
#include "paged_decode_mma_walk.cuh"
#include "paged_decode_walker.cuh"
#include "paged_decode_split_scratch.cuh"
#include "probe_layout.h"

namespace {

using probe::bf16;
using probe::check;

constexpr int HEAD_DIM_ARG = 128;
constexpr int SCALE_BITS_ARG = 0x3db504f3;  // 1 / sqrt(128) as float32 bits
constexpr double TOLERANCE = 2e-2;  // absolute, on outputs of magnitude <= 1 (bfloat16 output rounding)

// The shape arguments the kernel body reads through .data(), as MLX passes them.
struct Shape4 {
  int dims[4];
  __device__ const int* data() const { return dims; }
};

// The template arguments of both kernel bodies that the probe fixes: 16-row
// tensor-core blocks, causal, cp.async rings, the block table, scale 1 / sqrt(128).
constexpr int ROWS = 16;
constexpr bool CAUSAL = true;
constexpr bool MMA = true;
constexpr bool MMA_BULK = false;
constexpr int TABLE = 0;
constexpr int SCALE_BITS = SCALE_BITS_ARG;
constexpr bool SCALE_NEGATIVE = false;

template <typename T, int HEAD_DIM, int MMA_STAGES, bool MMA_SWIZZLE>
__global__ void probe_kernel(const T* query, const T* key_pages, const T* value_pages, const int32_t* block_table,
                             const int32_t* context_lens, float* scratch, Shape4 query_shape, Shape4 key_pages_shape,
                             Shape4 block_table_shape) {
#include "paged_decode_split.cu"
}

// The single-pass decode (paged_decode.cu) on the same walk: split count 0.
template <typename T, int HEAD_DIM, int MMA_STAGES, bool MMA_SWIZZLE>
__global__ void one_pass_kernel(const T* query, const T* key_pages, const T* value_pages, const int32_t* block_table,
                                const int32_t* context_lens, T* out, Shape4 query_shape, Shape4 key_pages_shape,
                                Shape4 block_table_shape) {
#include "paged_decode.cu"
}

// ---- Timeline (PAGECHECK_PROBE_TIMELINE=DIR) -------------------------------------------
// The same split decode body with the GPU's global timer read by thread 0 of
// each block at three points: entry, the end of its walk (the walk ends on a
// block barrier) and exit (a destructor, so the blocks that return after
// their ticket are stamped too); plus the multiprocessor it ran on.
__device__ unsigned long long* probe_timeline;  // [gridDim.y * gridDim.x][4]: entry, walk end, exit, SM id

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ unsigned long long* timeline_slot() {
  return probe_timeline + 4 * (static_cast<long long>(blockIdx.y) * gridDim.x + blockIdx.x);
}

struct TimelineExit {
  __device__ ~TimelineExit() {
    if (threadIdx.x == 0) timeline_slot()[2] = global_ns();
  }
};

template <typename Walker, typename... Args>
__device__ __forceinline__ void timed_walk_decode_block(Args... args) {
  pagecheck::walk_decode_block<Walker>(args...);
  if (threadIdx.x == 0) timeline_slot()[1] = global_ns();
}

template <typename T, int HEAD_DIM, int MMA_STAGES, bool MMA_SWIZZLE>
__global__ void timeline_kernel(const T* query, const T* key_pages, const T* value_pages, const int32_t* block_table,
                                const int32_t* context_lens, float* scratch, Shape4 query_shape,
                                Shape4 key_pages_shape, Shape4 block_table_shape) {
  if (threadIdx.x == 0) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    timeline_slot()[0] = global_ns();
    timeline_slot()[3] = sm;
  }
  const TimelineExit exit_stamp;
#define walk_decode_block timed_walk_decode_block
#include "paged_decode_split.cu"
#undef walk_decode_block
}

// Reads `words` words so that the L2 holds them, clean; one thread stores a
// sum no reader can predict, so the reads are not removed.
__global__ void read_flush(const unsigned* words, long long count, unsigned* sink) {
  unsigned sum = 0;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    sum ^= words[i];
  }
  if (sum == 0x9e3779b9u) {
    *sink = sum;
  }
}

using Kernel = void (*)(const bf16*, const bf16*, const bf16*, const int32_t*, const int32_t*, float*, Shape4, Shape4,
                        Shape4);
using OnePassKernel = void (*)(const bf16*, const bf16*, const bf16*, const int32_t*, const int32_t*, bf16*, Shape4,
                               Shape4, Shape4);

struct Variant {
  const char* name;
  Kernel kernel;
  OnePassKernel one_pass;
  Kernel timeline;
  int shared_bytes;
};

#define PROBE_VARIANT(S, SW)                                                                        \
  Variant {                                                                                         \
    "s" #S "_sw" #SW, probe_kernel<bf16, HEAD_DIM_ARG, S, SW>, one_pass_kernel<bf16, HEAD_DIM_ARG, S, SW>, \
        timeline_kernel<bf16, HEAD_DIM_ARG, S, SW>, pagecheck::DecodeMmaLayout<bf16, HEAD_DIM_ARG, S, false, SW>::SHARED_BYTES                \
  }
const Variant VARIANTS[] = {PROBE_VARIANT(3, true), PROBE_VARIANT(2, true), PROBE_VARIANT(4, true),
                            PROBE_VARIANT(3, false)};

std::vector<int> parse_splits(const char* text) {
  std::vector<int> splits;
  std::string item;
  for (const char* c = text;; ++c) {
    if (*c == ',' || *c == '\0') {
      const int value = std::atoi(item.c_str());
      if (value < 0 || value > pagecheck::MAX_MERGED_SPLITS) return {};
      splits.push_back(value);
      item.clear();
      if (*c == '\0') break;
    } else {
      item += *c;
    }
  }
  return splits;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: %s B H_Q H_KV CONTEXT PAGE SPLITS[,SPLITS...] [REPS] [VARIANT]\n", argv[0]);
    return 1;
  }
  const int batch = std::atoi(argv[1]), num_q_heads = std::atoi(argv[2]), num_kv_heads = std::atoi(argv[3]);
  const int context = std::atoi(argv[4]), page_size = std::atoi(argv[5]);
  const std::vector<int> split_counts = parse_splits(argv[6]);
  const int reps = argc > 7 ? std::atoi(argv[7]) : 50;
  const char* only = argc > 8 ? argv[8] : "";
  if (batch < 1 || num_kv_heads < 1 || num_q_heads % num_kv_heads != 0 || num_q_heads / num_kv_heads > 16 ||
      context < 1 || page_size < 1 || reps < 1 || split_counts.empty()) {
    std::fprintf(stderr, "need B >= 1, H_Q a multiple of H_KV (at most 16 times), CONTEXT, PAGE, REPS >= 1, "
                         "SPLITS in [0, %d] (0: the single-pass kernel)\n", pagecheck::MAX_MERGED_SPLITS);
    return 1;
  }
  constexpr int D = HEAD_DIM_ARG;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  // Table columns past the longest context's pages (-1 entries): PAGECHECK_PROBE_SPARE_PAGES, 1 by default; 0 lays
  // the table out as the op's benchmark does, each row exactly its context's pages.
  const char* spare_env = std::getenv("PAGECHECK_PROBE_SPARE_PAGES");
  char* spare_end = nullptr;
  const long spare_value = spare_env != nullptr ? std::strtol(spare_env, &spare_end, 10) : 1;
  if (spare_env != nullptr && (spare_end == spare_env || *spare_end != '\0' || spare_value < 0 || spare_value > 1024)) {
    std::fprintf(stderr, "PAGECHECK_PROBE_SPARE_PAGES must be an integer in 0..1024, got '%s'\n", spare_env);
    return 1;
  }
  const int spare_pages = static_cast<int>(spare_value);
  const char* flush_env = std::getenv("PAGECHECK_PROBE_FLUSH");
  const std::string flush_mode = flush_env != nullptr ? flush_env : "write";
  if (flush_mode != "write" && flush_mode != "read") {
    std::fprintf(stderr, "PAGECHECK_PROBE_FLUSH must be write or read, got '%s'\n", flush_mode.c_str());
    return 1;
  }
  const probe::Layout g =
      probe::make_layout(batch, num_q_heads, num_kv_heads, 1, context, page_size, D, spare_pages);
  const probe::DeviceLayout device = probe::upload(g);
  const long long rows = static_cast<long long>(batch) * num_q_heads;
  std::vector<std::vector<double>> reference(rows);
  for (long long row = 0; row < rows; ++row) {
    reference[row] = g.reference_row(static_cast<int>(row / num_q_heads), static_cast<int>(row % num_q_heads), 0,
                                     scale);
  }
  const Shape4 query_shape{{batch, num_q_heads, 1, D}};
  const Shape4 key_pages_shape{{g.num_pages, num_kv_heads, page_size, D}};
  const Shape4 block_table_shape{{batch, g.max_pages, 0, 0}};
  const int blocks = batch * num_kv_heads;  // one chunk of 16 rows holds a kv head's (at most 16) query rows
  const double kv_bytes = 4.0 * num_kv_heads * D *
      [&] { double n = 0; for (int c : g.context_lens) n += c; return n; }();

  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  int failures = 0, max_shared = 0, l2_bytes = 0;
  check(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, 0), "device attribute");
  void* l2_flush = nullptr;
  check(cudaMalloc(&l2_flush, 2 * static_cast<size_t>(l2_bytes)), "cudaMalloc");
  check(cudaMemset(l2_flush, 0x5a, 2 * static_cast<size_t>(l2_bytes)), "fill flush buffer");
  auto flush_l2 = [&](int i) {
    if (flush_mode == "read") {
      read_flush<<<264, 512>>>(static_cast<const unsigned*>(l2_flush), 2LL * l2_bytes / 4,
                               static_cast<unsigned*>(l2_flush));
      check(cudaGetLastError(), "read flush");
    } else {
      check(cudaMemsetAsync(l2_flush, i & 0xff, 2 * static_cast<size_t>(l2_bytes)), "flush L2");
    }
  };
  check(cudaDeviceGetAttribute(&max_shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0), "device attribute");
  // PAGECHECK_PROBE_TIMELINE=DIR: after each split plan's timing, one more launch (after the same flush) of the
  // stamped body; a summary line here and every block's stamps in DIR/timeline_<plan>.csv.
  const char* timeline_dir = std::getenv("PAGECHECK_PROBE_TIMELINE");
  auto timeline = [&](const Variant& variant, int splits, auto&& launch_stamped) {
    const int grid = blocks * splits;
    unsigned long long* stamps = nullptr;
    check(cudaMalloc(&stamps, grid * 4 * sizeof(unsigned long long)), "cudaMalloc");
    check(cudaMemset(stamps, 0, grid * 4 * sizeof(unsigned long long)), "clear stamps");
    check(cudaMemcpyToSymbol(probe_timeline, &stamps, sizeof(stamps)), "timeline symbol");
    check(cudaFuncSetAttribute(variant.timeline, cudaFuncAttributeMaxDynamicSharedMemorySize, variant.shared_bytes),
          "shared memory attribute");
    launch_stamped();
    check(cudaGetLastError(), "timeline launch");
    check(cudaDeviceSynchronize(), "timeline launch");
    std::vector<unsigned long long> t(grid * 4);
    check(cudaMemcpy(t.data(), stamps, t.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost), "stamps");
    check(cudaFree(stamps), "cudaFree");
    unsigned long long origin = ~0ull;
    for (int b = 0; b < grid; ++b) origin = std::min(origin, t[4 * b]);
    auto rel = [&](int b, int k) { return (t[4 * b + k] - origin) / 1000.0; };  // us after the first entry
    std::vector<double> entry, walk_end, walked, exit_time;
    std::vector<int> per_sm(1024, 0);
    for (int b = 0; b < grid; ++b) {
      entry.push_back(rel(b, 0));
      walk_end.push_back(rel(b, 1));
      walked.push_back(rel(b, 1) - rel(b, 0));
      exit_time.push_back(rel(b, 2));
      per_sm[std::min<unsigned long long>(t[4 * b + 3], 1023)]++;
    }
    // Per block column (a kv head's splits): the time from its last walk end to its last exit, the merge's tail.
    std::vector<double> tails;
    for (int x = 0; x < blocks; ++x) {
      double last_walk = 0, last_exit = 0;
      for (int y = 0; y < splits; ++y) {
        last_walk = std::max(last_walk, rel(y * blocks + x, 1));
        last_exit = std::max(last_exit, rel(y * blocks + x, 2));
      }
      tails.push_back(last_exit - last_walk);
    }
    auto quantiles = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      char text[96];
      std::snprintf(text, sizeof text, "%.2f / %.2f / %.2f", v.front(), v[v.size() / 2], v.back());
      return std::string(text);
    };
    const int sms = static_cast<int>(std::count_if(per_sm.begin(), per_sm.end(), [](int n) { return n > 0; }));
    const int busiest = *std::max_element(per_sm.begin(), per_sm.end());
    std::printf("TIMELINE warps%d %s splits%d B%d ctx%d (us after the first entry; min / median / max): entry %s, "
                "walk end %s, walk %s, exit %s; merge tail %s; %d blocks on %d SMs, at most %d on one\n",
                pagecheck::DECODE_WARPS, variant.name, splits, batch, context, quantiles(entry).c_str(),
                quantiles(walk_end).c_str(), quantiles(walked).c_str(), quantiles(exit_time).c_str(),
                quantiles(tails).c_str(), grid, sms, busiest);
    const std::string path = std::string(timeline_dir) + "/timeline_w" + std::to_string(pagecheck::DECODE_WARPS) +
        "_" + variant.name + "_B" + std::to_string(batch) + "_ctx" + std::to_string(context) + "_splits" +
        std::to_string(splits) + ".csv";
    if (FILE* f = std::fopen(path.c_str(), "w")) {
      std::fprintf(f, "x,y,sm,entry_us,walk_end_us,exit_us\n");
      for (int b = 0; b < grid; ++b) {
        std::fprintf(f, "%d,%d,%llu,%.3f,%.3f,%.3f\n", b % blocks, b / blocks, t[4 * b + 3], rel(b, 0), rel(b, 1),
                     rel(b, 2));
      }
      std::fclose(f);
    } else {
      std::fprintf(stderr, "cannot write %s\n", path.c_str());
    }
  };
  for (const Variant& variant : VARIANTS) {
    if (only[0] != '\0' && std::strstr(variant.name, only) == nullptr) continue;
    if (variant.shared_bytes > max_shared) {
      std::printf("SKIP warps%d %s: %d bytes of shared memory, the device allows %d\n", pagecheck::DECODE_WARPS,
                  variant.name, variant.shared_bytes, max_shared);
      continue;
    }
    check(cudaFuncSetAttribute(variant.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, variant.shared_bytes),
          "shared memory attribute");
    check(cudaFuncSetAttribute(variant.one_pass, cudaFuncAttributeMaxDynamicSharedMemorySize, variant.shared_bytes),
          "shared memory attribute");
    for (const int splits : split_counts) {
      // Split count 0 runs the single-pass kernel, which writes the same out region of the same scratch.
      const pagecheck::SplitScratch layout = pagecheck::split_scratch(rows, std::max(splits, 1), D, blocks, 2);
      float* scratch = nullptr;
      check(cudaMalloc(&scratch, layout.total_words * 4), "cudaMalloc");
      const size_t counter_bytes = (layout.base + 1 - layout.counters) * 4;
      // The split body (the probe's kernel, or its stamped twin) over this plan's grid.
      auto launch_split = [&](Kernel kernel) {
        kernel<<<dim3(blocks, splits), pagecheck::DECODE_THREADS, variant.shared_bytes>>>(
            device.query, device.keys, device.values, device.table, device.context_lens, scratch, query_shape,
            key_pages_shape, block_table_shape);
      };
      auto launch = [&]() {
        if (splits == 0) {
          variant.one_pass<<<blocks, pagecheck::DECODE_THREADS, variant.shared_bytes>>>(
              device.query, device.keys, device.values, device.table, device.context_lens,
              reinterpret_cast<bf16*>(scratch + layout.out_begin), query_shape, key_pages_shape, block_table_shape);
        } else {
          launch_split(variant.kernel);
        }
      };
      std::vector<bf16> outputs[2] = {std::vector<bf16>(rows * D), std::vector<bf16>(rows * D)};
      double max_error = 0.0;
      int bad = 0;
      float kernel_ms = 0.0f, fill_ms = 0.0f;
      for (int round = 0; round < 2; ++round) {
        // NaN everywhere but the counters: an output element the kernel leaves unwritten shows.
        check(cudaMemset(scratch, 0xff, layout.total_words * 4), "poison scratch");
        check(cudaMemset(scratch + layout.counters, 0, counter_bytes), "reset counters");
        launch();
        check(cudaGetLastError(), variant.name);
        check(cudaDeviceSynchronize(), variant.name);
        check(cudaMemcpy(outputs[round].data(), scratch + layout.out_begin, rows * D * 2, cudaMemcpyDeviceToHost),
              "copy out");
        if (round == 1) {
          for (int i = 0; i < reps; ++i) {
            check(cudaMemsetAsync(scratch + layout.counters, 0, counter_bytes), "reset counters");
            flush_l2(i);
            check(cudaEventRecord(start), "event");
            launch();
            check(cudaEventRecord(stop), "event");
            check(cudaEventSynchronize(stop), variant.name);
            float ms = 0.0f;
            check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
            kernel_ms += ms;
          }
          check(cudaEventRecord(start), "event");
          for (int i = 0; i < reps; ++i) {
            check(cudaMemsetAsync(scratch, 0, layout.total_words * 4), "fill scratch");
            launch();
          }
          check(cudaEventRecord(stop), "event");
          check(cudaEventSynchronize(stop), variant.name);
          check(cudaEventElapsedTime(&fill_ms, start, stop), "elapsed");
        }
      }
      if (timeline_dir != nullptr && splits > 0) {
        timeline(variant, splits, [&] {
          check(cudaMemset(scratch + layout.counters, 0, counter_bytes), "reset counters");
          flush_l2(0);
          launch_split(variant.timeline);
        });
      }
      for (long long row = 0; row < rows; ++row) {
        for (int d = 0; d < D; ++d) {
          const double error =
              std::fabs(static_cast<double>(__bfloat162float(outputs[0][row * D + d])) - reference[row][d]);
          bad += !(error <= TOLERANCE);
          max_error = std::isnan(error) ? INFINITY : std::max(max_error, error);
        }
      }
      const bool repeatable = std::memcmp(outputs[0].data(), outputs[1].data(), rows * D * 2) == 0;
      const double us = 1000.0 * kernel_ms / reps;
      const std::string plan = splits == 0 ? std::string("one pass") : "splits" + std::to_string(splits);
      std::printf("%s warps%d %s %s B%d ctx%d page%d spare%d flush %s: kernel %.1f us (%.2f TB/s) with fill %.1f us "
                  "max_err %.3g bad %d repeatable %d\n",
                  bad || !repeatable ? "FAIL" : "PASS", pagecheck::DECODE_WARPS, variant.name, plan.c_str(), batch,
                  context, page_size, spare_pages, flush_mode.c_str(), us, kv_bytes / us * 1e-6,
                  1000.0 * fill_ms / reps, max_error, bad, static_cast<int>(repeatable));
      failures += bad || !repeatable;
      check(cudaFree(scratch), "cudaFree");
    }
  }
  return failures ? 2 : 0;
}
