// paged_decode_reduce (Metal): mirror of paged_decode_reduce.cu, for
// fast::metal_kernel (header: paged_common.metal.h). Template argument: T.
// Input: partial float32 [R, S, D + 2]; output: out [B, H_q, L, D]. One
// threadgroup of REDUCE_WARPS simdgroups per row; simdgroup w takes splits w,
// w + REDUCE_WARPS, ...; lane lane_idx owns dims lane_idx + 32 k.
using namespace pagecheck;
constexpr int REDUCE_WARPS = 4;
constexpr int MAX_DIMS = 256;
constexpr int DIMS_PER_LANE = MAX_DIMS / WARP_LANES;
threadgroup float warp_sums[REDUCE_WARPS][MAX_DIMS];
threadgroup float warp_weights[REDUCE_WARPS];

// ---- Positions -----------------------------------------------------------------
const int lane_idx = int(thread_index_in_simdgroup);
const int warp_idx = int(simdgroup_index_in_threadgroup);
const long row_idx = long(threadgroup_position_in_grid.x);
const int num_splits = partial_shape[1];
const int head_dim = partial_shape[2] - 2;
const long row_stride = long(head_dim + 2);
const long row_base = row_idx * num_splits * row_stride;

// ---- The row's common max over all splits ---------------------------------------------
float row_max = -INFINITY;
for (int split = lane_idx; split < num_splits; split += WARP_LANES) {
  row_max = metal::max(row_max, partial[row_base + split * row_stride + head_dim]);
}
row_max = simd_max(row_max);
const float base = usable_max(row_max);

// ---- This simdgroup's splits -------------------------------------------------------------
float acc[DIMS_PER_LANE];
for (int k = 0; k < DIMS_PER_LANE; ++k) {
  acc[k] = 0.0f;
}
float weight_sum = 0.0f;
for (int split = warp_idx; split < num_splits; split += REDUCE_WARPS) {
  const long entry = row_base + split * row_stride;
  const float weight = metal::exp2(partial[entry + head_dim] - base);
  weight_sum += partial[entry + head_dim + 1] * weight;
  for (int k = 0; k < DIMS_PER_LANE; ++k) {
    const int dim = lane_idx + k * WARP_LANES;
    if (dim < head_dim) {
      acc[k] = metal::fma(partial[entry + dim], weight, acc[k]);
    }
  }
}
for (int k = 0; k < DIMS_PER_LANE; ++k) {
  const int dim = lane_idx + k * WARP_LANES;
  if (dim < head_dim) {
    warp_sums[warp_idx][dim] = acc[k];
  }
}
if (lane_idx == 0) {
  warp_weights[warp_idx] = weight_sum;
}
threadgroup_barrier(mem_flags::mem_threadgroup);

// ---- Merge the simdgroups and normalise -------------------------------------------------
float total = 0.0f;
for (int w = 0; w < REDUCE_WARPS; ++w) {
  total += warp_weights[w];
}
const float inv_total = total > 0.0f ? 1.0f / total : 0.0f;
for (int dim = int(thread_index_in_threadgroup); dim < head_dim; dim += REDUCE_WARPS * WARP_LANES) {
  float value = 0.0f;
  for (int w = 0; w < REDUCE_WARPS; ++w) {
    value += warp_sums[w][dim];
  }
  out[row_idx * head_dim + dim] = static_cast<T>(value * inv_total);
}
