// paged_decode_reduce: second pass of split-context decode.
//
// Body of an MLX fast::cuda_kernel (header: paged_common.cuh). Template
// argument: T (output dtype).
// Inputs: partial_out float32 [R, S, D] and partial_stats float32 [R, S, 2]
// from paged_decode_split, R = B * H_q * L rows. Output: out [B, H_q, L, D].
//
// Ownership: warp w of block x owns output row x * REDUCE_WARPS + w. Its lanes
// first reduce the S split maxima and weighted sums (split s to lane s % 32),
// then lane_idx owns dims lane_idx, lane_idx + 32, ... of the row and sums
// the S partial outputs for them, scaled to the common max. It writes that
// row of `out` only. A row whose splits are all empty (context 0) gets zeros.
// Launch: 32 * REDUCE_WARPS threads per block, ceil(R / REDUCE_WARPS) blocks,
// no shared memory.
using namespace pagecheck;
constexpr int REDUCE_WARPS = 4;

// ---- Positions -----------------------------------------------------------------
const int lane_idx = threadIdx.x % WARP_LANES;
const int warp_idx = threadIdx.x / WARP_LANES;
const long long num_rows = partial_stats_shape[0];
const int num_splits = partial_stats_shape[1];
const int head_dim = partial_out_shape[2];
const long long row_idx =
    static_cast<long long>(blockIdx.x) * REDUCE_WARPS + warp_idx;
if (row_idx < num_rows) {
  const float* stats = partial_stats + row_idx * num_splits * 2;
  const float* partial = partial_out + row_idx * num_splits * head_dim;

  // ---- Common max and total weight over the splits --------------------------------
  float row_max = NEG_INF;
  for (int split = lane_idx; split < num_splits; split += WARP_LANES) {
    row_max = fmaxf(row_max, stats[split * 2]);
  }
  row_max = group_max<WARP_LANES>(row_max);
  const float base = usable_max(row_max);
  float total = 0.0f;
  for (int split = lane_idx; split < num_splits; split += WARP_LANES) {
    total += stats[split * 2 + 1] * exp2f(stats[split * 2] - base);
  }
  total = group_sum<WARP_LANES>(total);
  const float inv_total = total > 0.0f ? 1.0f / total : 0.0f;

  // ---- Weighted sum of the partial outputs --------------------------------------------
  for (int dim = lane_idx; dim < head_dim; dim += WARP_LANES) {
    float value = 0.0f;
    for (int split = 0; split < num_splits; ++split) {
      value += partial[split * head_dim + dim] *
          exp2f(stats[split * 2] - base);
    }
    out[row_idx * head_dim + dim] = from_float<T>(value * inv_total);
  }
}
