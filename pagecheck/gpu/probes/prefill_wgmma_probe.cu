// prefill_wgmma_probe: the warpgroup prefill (paged_prefill_wgmma.cu) as a
// standalone CUDA program, for tuning it without rebuilding the extension.
// Each variant (warpgroups x key tile, ring stages) runs on one paged layout
// (shuffled pages, NaN in every unused slot, the last request of three or
// more with context 0), is checked against a float64 host reference on
// sampled rows, timed with CUDA events over back-to-back launches, and run a
// second time to be compared bit for bit (a race shows as a difference).
// bfloat16, D 128, causal, scale 1 / sqrt(D), through the block table.
//
//   nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -I ext/kernels \
//        pagecheck/gpu/probes/prefill_wgmma_probe.cu -o prefill_wgmma_probe
//   ./prefill_wgmma_probe B H_Q H_KV L CONTEXT PAGE [REPS] [SAMPLES] [VARIANT]
//
// `scripts/gpu_probe.sh prefill` builds and runs it at the benchmark's shapes.
// Exit status 0 when every variant agreed with the reference and with
// itself, 2 otherwise, 1 on bad arguments or a CUDA error.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda/std/limits>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>
#include "paged_common.cuh"
#include "paged_mma.cuh"
#include "paged_bulk_copy.cuh"
#include "paged_wgmma.cuh"
#include "probe_layout.h"

namespace {

constexpr int HEAD_DIM_ARG = 128;
constexpr int SCALE_BITS_ARG = 0x3db504f3;  // 1 / sqrt(128) as float32 bits
constexpr double TOLERANCE = 2e-2;  // absolute, on outputs of magnitude <= 1 (bfloat16 output rounding)

template <typename T, int HEAD_DIM, int KEY_TILE, int STAGES, int WARPGROUPS, int PRODUCER_REGISTERS>
__global__ void __launch_bounds__(128 * (WARPGROUPS + (PRODUCER_REGISTERS > 0)), 1) probe_kernel(
    const T* query, const T* key_pages, const T* value_pages, const int32_t* block_table,
    const int32_t* context_lens, T* out, int batch, int num_q_heads, int num_queries, int head_dim, int num_pages,
    int num_kv_heads, int page_size, int max_pages) {
  constexpr bool CAUSAL = true;
  constexpr int TABLE = 0;
  constexpr int SCALE_BITS = SCALE_BITS_ARG;
  constexpr bool SCALE_NEGATIVE = false;
#include "paged_prefill_wgmma.cu"
}

using probe::bf16;
using probe::check;
using Kernel = void (*)(const bf16*, const bf16*, const bf16*, const int32_t*, const int32_t*, bf16*, int, int, int,
                        int, int, int, int, int);

struct Variant {
  const char* name;
  Kernel kernel;
  int key_tile, stages, warpgroups, producer_registers;
};

// wgW_ktK_sS: W consumer warpgroups that copy their own tiles; a _pR suffix adds a producer warpgroup of R registers
// a thread that copies them instead.
#define PROBE_VARIANT(KT, S, WG, PR, SUFFIX)                                                  \
  Variant {                                                                                   \
    "wg" #WG "_kt" #KT "_s" #S SUFFIX, probe_kernel<bf16, HEAD_DIM_ARG, KT, S, WG, PR>, KT, S, WG, PR \
  }
const Variant VARIANTS[] = {
    PROBE_VARIANT(128, 3, 2, 0, ""),    PROBE_VARIANT(128, 3, 2, 56, "_p56"), PROBE_VARIANT(128, 2, 2, 0, ""),
    PROBE_VARIANT(128, 2, 2, 56, "_p56"), PROBE_VARIANT(64, 3, 2, 0, ""),     PROBE_VARIANT(64, 4, 2, 56, "_p56"),
    PROBE_VARIANT(64, 3, 3, 0, ""),     PROBE_VARIANT(64, 4, 3, 0, ""),       PROBE_VARIANT(64, 3, 1, 0, ""),
    PROBE_VARIANT(64, 4, 1, 56, "_p56"),
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: %s B H_Q H_KV L CONTEXT PAGE [REPS] [SAMPLES] [VARIANT]\n", argv[0]);
    return 1;
  }
  const int batch = std::atoi(argv[1]), num_q_heads = std::atoi(argv[2]), num_kv_heads = std::atoi(argv[3]);
  const int num_queries = std::atoi(argv[4]), context = std::atoi(argv[5]), page_size = std::atoi(argv[6]);
  const int reps = argc > 7 ? std::atoi(argv[7]) : 20;
  const int samples = argc > 8 ? std::atoi(argv[8]) : 64;
  const char* only = argc > 9 ? argv[9] : "";
  if (batch < 1 || num_kv_heads < 1 || num_q_heads % num_kv_heads != 0 || num_queries < 9 ||
      context < num_queries || page_size < 1 || reps < 1 || samples < 1) {
    std::fprintf(stderr, "need B >= 1, H_Q a multiple of H_KV, L >= 9, CONTEXT >= L, PAGE, REPS, SAMPLES >= 1\n");
    return 1;
  }
  constexpr int D = HEAD_DIM_ARG;
  const int group = num_q_heads / num_kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));

  // ---- Layout (probe_layout.h) and the reference on sampled rows ------------------------------
  const probe::Layout g = probe::make_layout(batch, num_q_heads, num_kv_heads, num_queries, context, page_size, D);
  const std::vector<int>& context_lens = g.context_lens;
  std::mt19937 rng(4321);
  struct SampledRow {
    int request_idx, q_head_idx, query_idx;
    std::vector<double> out;
  };
  std::vector<SampledRow> rows;
  for (int t = 0; t < samples; ++t) {
    const int request_idx = static_cast<int>(rng() % batch), q_head_idx = static_cast<int>(rng() % num_q_heads);
    const int query_idx = t == 0 ? 0 : (t == 1 ? num_queries - 1 : static_cast<int>(rng() % num_queries));
    rows.push_back({request_idx, q_head_idx, query_idx, g.reference_row(request_idx, q_head_idx, query_idx, scale)});
  }
  const probe::DeviceLayout device = probe::upload(g);
  const size_t query_elems = g.query.size();
  const int num_pages = g.num_pages, max_pages = g.max_pages;
  bf16* out_d;
  check(cudaMalloc(&out_d, query_elems * 2), "cudaMalloc");

  double flops = 0.0;
  for (int request_idx = 0; request_idx < batch; ++request_idx) {
    for (int query_idx = 0; query_idx < num_queries; ++query_idx) {
      flops += 4.0 * D * std::max(0, query_idx + context_lens[request_idx] - num_queries + 1);
    }
  }
  flops *= num_q_heads;

  // ---- Each variant: check, time, check again ------------------------------------------------
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  int failures = 0;
  std::vector<bf16> first(query_elems), second(query_elems);
  for (const Variant& variant : VARIANTS) {
    if (only[0] != '\0' && std::strstr(variant.name, only) == nullptr) continue;
    const int shared_bytes = (2 * variant.stages * variant.key_tile + variant.warpgroups * 64) * D * 2 +
        2 * variant.stages * 8 + 1024;
    const int blocks = batch * num_kv_heads * ((group * num_queries + 64 * variant.warpgroups - 1) /
                                               (64 * variant.warpgroups));
    check(cudaFuncSetAttribute(variant.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes),
          "shared memory attribute");
    check(cudaMemset(out_d, 0xff, query_elems * 2), "fill out");
    auto launch = [&]() {
      variant.kernel<<<blocks, 128 * (variant.warpgroups + (variant.producer_registers > 0)), shared_bytes>>>(
          device.query, device.keys, device.values, device.table, device.context_lens, out_d, batch, num_q_heads,
          num_queries, D, num_pages, num_kv_heads, page_size, max_pages);
    };
    launch();
    check(cudaGetLastError(), variant.name);
    check(cudaDeviceSynchronize(), variant.name);
    check(cudaMemcpy(first.data(), out_d, query_elems * 2, cudaMemcpyDeviceToHost), "copy out");
    double max_error = 0.0;
    int bad = 0;
    for (const SampledRow& row : rows) {
      const size_t base = g.query_offset(row.request_idx, row.q_head_idx, row.query_idx);
      for (int d = 0; d < D; ++d) {
        const double error = std::fabs(static_cast<double>(__bfloat162float(first[base + d])) - row.out[d]);
        bad += !(error <= TOLERANCE);
        max_error = std::isnan(error) ? INFINITY : std::max(max_error, error);
      }
    }
    for (int i = 0; i < 3; ++i) launch();
    check(cudaEventRecord(start), "event");
    for (int i = 0; i < reps; ++i) launch();
    check(cudaEventRecord(stop), "event");
    check(cudaEventSynchronize(stop), variant.name);
    float ms = 0.0f;
    check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    check(cudaMemcpy(second.data(), out_d, query_elems * 2, cudaMemcpyDeviceToHost), "copy out");
    const bool repeatable = std::memcmp(first.data(), second.data(), query_elems * 2) == 0;
    const double us = 1000.0 * ms / reps;
    std::printf("%s %s B%d L%d ctx%d page%d: %.1f us (%.0f TFLOP/s) max_err %.3g bad %d repeatable %d\n",
                bad || !repeatable ? "FAIL" : "PASS", variant.name, batch, num_queries, context, page_size, us,
                flops / us * 1e-6, max_error, bad, static_cast<int>(repeatable));
    failures += bad || !repeatable;
  }
  return failures ? 2 : 0;
}
