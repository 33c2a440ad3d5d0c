// The cross-warp merge of the decode kernels.
//
// Each warp of a decode block walks its own tiles and ends with, per query
// row of the block, a running max (log2 units), a sum of weights and an
// unnormalised output relative to that max. The warps publish these into
// shared memory (laid out below; the walk's staging ring is dead by then and
// its bytes are reused), and every (row, dim) of the block's result is the
// rescaled sum over the warps. Both decode walks (CUDA cores and tensor
// cores) publish the same layout, so the epilogues of paged_decode and
// paged_decode_split serve either.
#ifndef PAGECHECK_PAGED_DECODE_MERGE_CUH
#define PAGECHECK_PAGED_DECODE_MERGE_CUH

namespace pagecheck {

// Warps per decode block. The extension's launches take 4; the standalone
// probe (pagecheck/gpu/probes/decode_split_probe.cu) may compile with another
// count through PAGECHECK_DECODE_WARPS.
#ifdef PAGECHECK_DECODE_WARPS
constexpr int DECODE_WARPS = PAGECHECK_DECODE_WARPS;
#else
constexpr int DECODE_WARPS = 4;
#endif
constexpr int DECODE_THREADS = DECODE_WARPS * WARP_LANES;

// The block's merged state for one (row, dim).
struct MergedState {
  float max;
  float sum;
  float acc;
};

// Shared layout: max[DECODE_WARPS][ROWS], sum[DECODE_WARPS][ROWS],
// acc[DECODE_WARPS][ROWS][ACC_ELEMS] floats; ACC_ELEMS >= HEAD_DIM.
template <int ROWS, int ACC_ELEMS>
struct DecodeMerge {
  static constexpr int BYTES =
      DECODE_WARPS * ROWS * (ACC_ELEMS + 2) * static_cast<int>(sizeof(float));

  float* row_max;
  float* row_sum;
  float* row_acc;

  __device__ explicit DecodeMerge(unsigned char* shared)
      : row_max(reinterpret_cast<float*>(shared)),
        row_sum(row_max + DECODE_WARPS * ROWS),
        row_acc(row_sum + DECODE_WARPS * ROWS) {}

  __device__ float& acc(int warp_idx, int row, int dim) {
    return row_acc[(warp_idx * ROWS + row) * ACC_ELEMS + dim];
  }

  __device__ void publish_stats(int warp_idx, int row, float max, float sum) {
    row_max[warp_idx * ROWS + row] = max;
    row_sum[warp_idx * ROWS + row] = sum;
  }

  __device__ MergedState merged(int row, int dim) const {
    MergedState s;
    s.max = NEG_INF;
#pragma unroll
    for (int w = 0; w < DECODE_WARPS; ++w) {
      s.max = fmaxf(s.max, row_max[w * ROWS + row]);
    }
    const float base = usable_max(s.max);
    s.sum = 0.0f;
    s.acc = 0.0f;
#pragma unroll
    for (int w = 0; w < DECODE_WARPS; ++w) {
      const float weight = exp2f(row_max[w * ROWS + row] - base);
      s.sum += row_sum[w * ROWS + row] * weight;
      s.acc += row_acc[(w * ROWS + row) * ACC_ELEMS + dim] * weight;
    }
    return s;
  }
};

// The tiles [tile_begin, tile_end) of a row's context that this warp walks:
// tile_begin + warp_idx, then every DECODE_WARPS-th.
__device__ __forceinline__ int warp_tile_count(int tile_begin, int tile_end, int warp_idx) {
  const int first = tile_begin + warp_idx;
  return first < tile_end ? ceil_div(tile_end - first, DECODE_WARPS) : 0;
}

// A decode block's dynamic shared memory: DECODE_WARPS copy rings of STAGES
// stages of STAGE_ELEMS elements during the walk, the merge region (same
// bytes, reused) after it. Both walks' layouts are built on it.
template <typename T, int STAGE_ELEMS, int STAGES, int ROWS, int ACC_ELEMS>
struct DecodeShared {
  static constexpr int RING_BYTES =
      DECODE_WARPS * STAGES * STAGE_ELEMS * static_cast<int>(sizeof(T));
  using Merge = DecodeMerge<ROWS, ACC_ELEMS>;
  static constexpr int SHARED_BYTES =
      RING_BYTES > Merge::BYTES ? RING_BYTES : Merge::BYTES;
};

} // namespace pagecheck

#endif // PAGECHECK_PAGED_DECODE_MERGE_CUH
