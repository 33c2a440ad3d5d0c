// The paged layout the standalone kernel probes run on (prefill_wgmma_probe.cu,
// decode_split_probe.cu), its float64 reference and its device copy.
//
// bfloat16 values rounded on the host, so the reference sees exactly what the
// kernel reads; pages shuffled through the block table; NaN in every pool
// slot no request owns, so a kernel that reads past a context shows as NaN.
// Request r has context CONTEXT - 7 (r % 3); in a batch of three or more the
// last request has context 0. Queries are the last L positions of each
// context (the causal mask aligned to the end).
#ifndef PAGECHECK_PROBE_LAYOUT_H
#define PAGECHECK_PROBE_LAYOUT_H

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace probe {

using bf16 = __nv_bfloat16;

inline void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "CUDA error in %s: %s\n", what, cudaGetErrorString(status));
    std::exit(1);
  }
}

inline float round_bf16(float x) {
  return __bfloat162float(__float2bfloat16(x));
}

struct Layout {
  int batch, num_q_heads, num_kv_heads, num_queries, page_size, head_dim;
  int max_pages, num_pages;
  std::vector<float> query, keys, values;  // [B, H_q, L, D]; pools [P, H_kv, page, D]
  std::vector<int> table, context_lens;    // [B, max_pages] (-1 past a request's pages); [B]

  size_t query_offset(int request_idx, int q_head_idx, int query_idx) const {
    return ((static_cast<size_t>(request_idx) * num_q_heads + q_head_idx) * num_queries + query_idx) * head_dim;
  }

  size_t slot_offset(int request_idx, int kv_head_idx, int pos) const {
    const int page_id = table[static_cast<size_t>(request_idx) * max_pages + pos / page_size];
    return ((static_cast<size_t>(page_id) * num_kv_heads + kv_head_idx) * page_size + pos % page_size) * head_dim;
  }

  // Attention of one query row in float64: causal, its last key at position
  // query_idx + context - L; a context of 0 gives zeros.
  std::vector<double> reference_row(int request_idx, int q_head_idx, int query_idx, double scale) const {
    std::vector<double> out(head_dim, 0.0);
    const int kv_head_idx = q_head_idx / (num_q_heads / num_kv_heads);
    const int key_limit = std::min(query_idx + context_lens[request_idx] - num_queries, context_lens[request_idx] - 1);
    if (key_limit < 0) return out;
    const float* q = &query[query_offset(request_idx, q_head_idx, query_idx)];
    std::vector<double> weights(key_limit + 1);
    double max_score = -INFINITY, total = 0.0;
    for (int pos = 0; pos <= key_limit; ++pos) {
      const float* k = &keys[slot_offset(request_idx, kv_head_idx, pos)];
      double dot = 0.0;
      for (int d = 0; d < head_dim; ++d) dot += static_cast<double>(q[d]) * k[d];
      weights[pos] = dot * scale;
      max_score = std::max(max_score, weights[pos]);
    }
    for (double& w : weights) {
      w = std::exp(w - max_score);
      total += w;
    }
    for (int pos = 0; pos <= key_limit; ++pos) {
      const float* v = &values[slot_offset(request_idx, kv_head_idx, pos)];
      for (int d = 0; d < head_dim; ++d) out[d] += weights[pos] / total * v[d];
    }
    return out;
  }
};

inline Layout make_layout(int batch, int num_q_heads, int num_kv_heads, int num_queries, int context, int page_size,
                          int head_dim, int spare_pages = 1, unsigned seed = 1234) {
  Layout g{batch, num_q_heads, num_kv_heads, num_queries, page_size, head_dim, 0, 0, {}, {}, {}, {}, {}};
  const int pages_per_request = (context + page_size - 1) / page_size;
  g.max_pages = pages_per_request + spare_pages;
  g.num_pages = batch * pages_per_request + 5;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const size_t pool_elems = static_cast<size_t>(g.num_pages) * num_kv_heads * page_size * head_dim;
  g.query.resize(static_cast<size_t>(batch) * num_q_heads * num_queries * head_dim);
  g.keys.assign(pool_elems, NAN);
  g.values.assign(pool_elems, NAN);
  for (float& x : g.query) x = round_bf16(uniform(rng));
  std::vector<int> page_order(g.num_pages);
  for (int i = 0; i < g.num_pages; ++i) page_order[i] = i;
  std::shuffle(page_order.begin(), page_order.end(), rng);
  g.table.assign(static_cast<size_t>(batch) * g.max_pages, -1);
  g.context_lens.resize(batch);
  for (int r = 0; r < batch; ++r) {
    g.context_lens[r] = (batch > 2 && r == batch - 1) ? 0 : std::max(context - (r % 3) * 7, 0);
    for (int p = 0; p < pages_per_request; ++p) {
      g.table[static_cast<size_t>(r) * g.max_pages + p] = page_order[r * pages_per_request + p];
    }
  }
  for (int r = 0; r < batch; ++r) {
    for (int pos = 0; pos < g.context_lens[r]; ++pos) {
      for (int h = 0; h < num_kv_heads; ++h) {
        const size_t base = g.slot_offset(r, h, pos);
        for (int d = 0; d < head_dim; ++d) {
          g.keys[base + d] = round_bf16(2.0f * uniform(rng));
          g.values[base + d] = round_bf16(uniform(rng));
        }
      }
    }
  }
  return g;
}

// The layout's arrays on the device, query and pools as bfloat16.
struct DeviceLayout {
  bf16 *query = nullptr, *keys = nullptr, *values = nullptr;
  int32_t *table = nullptr, *context_lens = nullptr;
};

template <typename X>
X* upload(const std::vector<X>& host) {
  X* device = nullptr;
  check(cudaMalloc(&device, host.size() * sizeof(X)), "cudaMalloc");
  check(cudaMemcpy(device, host.data(), host.size() * sizeof(X), cudaMemcpyHostToDevice), "copy to device");
  return device;
}

inline std::vector<bf16> to_bf16(const std::vector<float>& x) {
  std::vector<bf16> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = __float2bfloat16(x[i]);
  return y;
}

inline DeviceLayout upload(const Layout& g) {
  DeviceLayout d;
  d.query = upload(to_bf16(g.query));
  d.keys = upload(to_bf16(g.keys));
  d.values = upload(to_bf16(g.values));
  std::vector<int32_t> table(g.table.begin(), g.table.end()), lens(g.context_lens.begin(), g.context_lens.end());
  d.table = upload(table);
  d.context_lens = upload(lens);
  return d;
}

}  // namespace probe

#endif  // PAGECHECK_PROBE_LAYOUT_H
