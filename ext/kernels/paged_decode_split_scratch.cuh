// The split decode's single float32 output, "scratch", in 4-byte words:
//
//   [0, partial_words)             per row and split an entry of
//                                  partial_entry(D) words: the unnormalised
//                                  output (D words), its max in log2 units,
//                                  its sum of weights, padding to 16 bytes
//                                  ([R, S, entry], R = B * H_q * L)
//   [counters, counters + blocks)  one arrival counter per block column x
//   base                           never written: the value every word was
//                                  filled with, so the counters' start
//   [out_begin, out_begin + out_words)  the attention output, dtype T,
//                                  [B, H_q, L, D], 16-byte aligned
//
// One output means one fill (the fill is what gives a custom kernel's output
// device memory) and the last split block of each column merges the splits
// itself, so a split call is one fill and one kernel instead of two of each.
// The planner sizes it with this very header (ext/src/common/gpu_plan.cpp
// includes it; only the layout is plain C++), for the op and, through the
// binding, for the Python launcher.
#ifndef PAGECHECK_PAGED_DECODE_SPLIT_SCRATCH_CUH
#define PAGECHECK_PAGED_DECODE_SPLIT_SCRATCH_CUH

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define PAGECHECK_HOST_DEVICE __host__ __device__
#else
#define PAGECHECK_HOST_DEVICE
#endif

namespace pagecheck {

// Most splits a launch may take: the planner's kMaxSplits.
constexpr int MAX_MERGED_SPLITS = 64;

// Words per partial entry: D + 2 rounded up to 4, so every entry starts
// 16-byte aligned and the merge reads it as float4.
PAGECHECK_HOST_DEVICE constexpr int partial_entry(int head_dim) {
  return (head_dim + 2 + 3) / 4 * 4;
}

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
// What the merge reads per load: float4 where the head dim allows it.
template <int VEC>
struct MergeLoad {
  using type = float;
};
template <>
struct MergeLoad<4> {
  using type = float4;
};

// A partial entry's max and sum, from L2: one 8-byte load where the head dim
// keeps them 8-byte aligned (entries start 16-byte aligned).
template <int HEAD_DIM>
__device__ __forceinline__ float2 load_split_stats(const float* entry) {
  if constexpr (HEAD_DIM % 2 == 0) {
    return __ldcg(reinterpret_cast<const float2*>(entry + HEAD_DIM));
  } else {
    return make_float2(__ldcg(entry + HEAD_DIM), __ldcg(entry + HEAD_DIM + 1));
  }
}
#endif

struct SplitScratch {
  long long partial_words;
  long long counters;
  long long base;
  long long out_begin;
  long long out_words;
  long long total_words;
};

PAGECHECK_HOST_DEVICE inline SplitScratch split_scratch(
    long long rows,
    int splits,
    int head_dim,
    long long blocks,
    int itemsize) {
  SplitScratch s;
  s.partial_words = rows * splits * partial_entry(head_dim);
  s.counters = s.partial_words;
  s.base = s.counters + blocks;
  s.out_begin = (s.base + 1 + 3) / 4 * 4;
  s.out_words = (rows * head_dim * itemsize + 3) / 4;
  s.total_words = s.out_begin + s.out_words;
  return s;
}

} // namespace pagecheck

#endif // PAGECHECK_PAGED_DECODE_SPLIT_SCRATCH_CUH
