// paged_decode_reduce: second pass of split-context decode.
//
// Body of an MLX fast::cuda_kernel (header: paged_common.cuh). Template
// argument: T (output dtype).
// Input: partial float32 [R, S, D + 2] from paged_decode_split (R = B * H_q * L
// rows; per split the unnormalised output, its max in log2 units and its sum
// of weights). Output: out [B, H_q, L, D].
//
// Ownership: block x owns output row x. Its warps split the S splits among
// them (warp w takes splits w, w + REDUCE_WARPS, ...), so the loads of
// different splits are in flight together instead of one after another; lane
// lane_idx owns dims lane_idx + 32 k (k < MAX_DIMS / 32, in registers). Each
// warp sums its splits' outputs scaled to the row's common max; the warps'
// sums meet in shared memory and the block writes that row of `out` only. A row whose splits are all empty
// (context 0) gets zeros.
// Launch: 32 * REDUCE_WARPS threads per block, R blocks, no dynamic shared
// memory.
using namespace pagecheck;
constexpr int REDUCE_WARPS = 4;
constexpr int MAX_DIMS = 256;
__shared__ float warp_sums[REDUCE_WARPS][MAX_DIMS];
__shared__ float warp_weights[REDUCE_WARPS];

// ---- Positions -----------------------------------------------------------------
const int lane_idx = threadIdx.x % WARP_LANES;
const int warp_idx = threadIdx.x / WARP_LANES;
const long long row_idx = blockIdx.x;
const int num_splits = partial_shape[1];
const int head_dim = partial_shape[2] - 2;
const float* row = partial + row_idx * num_splits * (head_dim + 2);

// ---- The row's common max over all splits (every thread computes it) --------------
float row_max = NEG_INF;
for (int split = lane_idx; split < num_splits; split += WARP_LANES) {
  row_max = fmaxf(row_max, row[split * (head_dim + 2) + head_dim]);
}
row_max = group_max<WARP_LANES>(row_max);
const float base = usable_max(row_max);

// ---- This warp's splits: weighted sums of outputs and of weights --------------------
constexpr int DIMS_PER_LANE = MAX_DIMS / WARP_LANES;
float acc[DIMS_PER_LANE];
#pragma unroll
for (int k = 0; k < DIMS_PER_LANE; ++k) {
  acc[k] = 0.0f;
}
float weight_sum = 0.0f;
#pragma unroll 4
for (int split = warp_idx; split < num_splits; split += REDUCE_WARPS) {
  const float* entry = row + split * (head_dim + 2);
  const float weight = exp2f(entry[head_dim] - base);
  weight_sum += entry[head_dim + 1] * weight;
#pragma unroll
  for (int k = 0; k < DIMS_PER_LANE; ++k) {
    const int dim = lane_idx + k * WARP_LANES;
    if (dim < head_dim) {
      acc[k] = fmaf(entry[dim], weight, acc[k]);
    }
  }
}
#pragma unroll
for (int k = 0; k < DIMS_PER_LANE; ++k) {
  const int dim = lane_idx + k * WARP_LANES;
  if (dim < head_dim) {
    warp_sums[warp_idx][dim] = acc[k];
  }
}
if (lane_idx == 0) {
  warp_weights[warp_idx] = weight_sum;
}
__syncthreads();

// ---- Merge the warps and normalise ---------------------------------------------------
float total = 0.0f;
#pragma unroll
for (int w = 0; w < REDUCE_WARPS; ++w) {
  total += warp_weights[w];
}
const float inv_total = total > 0.0f ? 1.0f / total : 0.0f;
for (int dim = threadIdx.x; dim < head_dim; dim += blockDim.x) {
  float value = 0.0f;
#pragma unroll
  for (int w = 0; w < REDUCE_WARPS; ++w) {
    value += warp_sums[w][dim];
  }
  out[row_idx * head_dim + dim] = from_float<T>(value * inv_total);
}
