// paged_decode_split: split-context decode (L <= 8), splits merged in place.
//
// Body of an MLX fast::cuda_kernel (headers as paged_decode, plus
// paged_decode_split_scratch.cuh). Template arguments: T, HEAD_DIM, ROWS,
// CAUSAL, MMA, MMA_STAGES, MMA_BULK, MMA_SWIZZLE, TABLE, SCALE_BITS, SCALE_NEGATIVE, as
// paged_decode.
// Inputs: as paged_decode. Output: scratch, float32 words laid out by
// split_scratch (paged_decode_split_scratch.cuh); the attention output is its
// out region. S = gridDim.y.
//
// Ownership: block (x, y) owns (request_idx, kv_head_idx, chunk_idx) as in
// paged_decode and split y: an equal share of the context's tiles (whole
// tiles, so every K/V slot is read by one block only; split_tiles in
// paged_decode_walker.cuh). It writes slot y of its rows' partial states; a
// split past the context writes the empty state (max -inf, sum 0, output 0).
// Then it takes a ticket from column x's counter; the block that draws the
// last ticket (all S partials of its rows are visible by then: each block
// fences before drawing) merges the S partials of its rows into their rows
// of the output, in split order, so the result does not depend on which
// block came last. No other block writes those output rows. S is at most
// MAX_MERGED_SPLITS (the launchers' limit).
// Launch: DECODE_THREADS threads per block, grid (blocks, S), dynamic shared
// memory DecodeWalker<...>::Layout::SHARED_BYTES; scratch filled beforehand.
using namespace pagecheck;
using Walker = DecodeWalker<T, HEAD_DIM, ROWS, CAUSAL, MMA, MMA_STAGES, MMA_BULK, MMA_SWIZZLE>;
using Layout = typename Walker::Layout;
require_shared_bytes(Layout::SHARED_BYTES);
// The ring starts on a 128-byte line (SharedRows' swizzle assumes it): after
// the static flag below a 16-byte start split each quarter-warp's cp.async
// store across two lines, and L2 was asked for twice the sectors (ncu).
extern __shared__ __align__(128) unsigned char shared[];
__shared__ bool merges_splits;

// ---- Positions and the scratch's regions -----------------------------------------------
const PagedGeometry geo = make_geometry(
    query_shape.data(), key_pages_shape.data(), block_table_shape.data(), TABLE);
const DecodeBlock block = decode_block(geo, context_lens, ROWS);
const int split_idx = blockIdx.y;
const int num_splits = gridDim.y;
const long long total_rows = static_cast<long long>(geo.batch) * geo.num_q_heads * geo.num_queries;
const SplitScratch layout = split_scratch(
    total_rows, num_splits, HEAD_DIM, gridDim.x, static_cast<int>(sizeof(T)));
float* partial = scratch;
unsigned* counters = reinterpret_cast<unsigned*>(scratch + layout.counters);
T* out = reinterpret_cast<T*>(scratch + layout.out_begin);
constexpr int ENTRY = partial_entry(HEAD_DIM);
static_assert(
    Layout::SHARED_BYTES >= ROWS * (MAX_MERGED_SPLITS + 1) * static_cast<int>(sizeof(float)),
    "the merge's weights live in the ring's shared memory");

// ---- Walk this split's tiles --------------------------------------------------------
walk_decode_block<Walker>(
    block, query, key_pages, value_pages, block_table, scale_of(SCALE_BITS, SCALE_NEGATIVE), split_idx, num_splits,
    shared);

// ---- Store the unnormalised partial state of the live rows ------------------------------
// (Only rows 0 .. live_rows - 1 exist; the walk may leave the others unpublished.)
const typename Layout::Merge merge(shared);
const int live_rows = block.live_rows(ROWS);
for (int idx = threadIdx.x; idx < live_rows * HEAD_DIM; idx += blockDim.x) {
  const int r = idx / HEAD_DIM;
  const int dim = idx % HEAD_DIM;
  const QueryRow row = block.row(r, CAUSAL);
  const MergedState s = merge.merged(r, dim);
  float* entry = partial + ((row.offset / HEAD_DIM) * num_splits + split_idx) * ENTRY;
  entry[dim] = s.acc;
  if (dim == 0) {
    entry[HEAD_DIM] = s.max;
    entry[HEAD_DIM + 1] = s.sum;
  }
}

// ---- The last block of the column merges the splits ------------------------------------
__threadfence();
__syncthreads();
if (threadIdx.x == 0) {
  const unsigned start = counters[layout.base - layout.counters];
  const unsigned ticket = atomicAdd(counters + blockIdx.x, 1u) - start;
  merges_splits = ticket == static_cast<unsigned>(num_splits - 1);
}
__syncthreads();
if (!merges_splits) {
  return;
}
__threadfence();
// Other blocks wrote the partials: read them from L2 (__ldcg), not L1. The
// ring's shared memory is free now; it holds each row's split weights.
// 1. Warp w takes rows w, w + DECODE_WARPS, ...; its lanes read the splits'
//    maxima and sums side by side: weight of split s = 2^(max_s - row max),
//    and the row's 1 / sum of weighted sums.
float* weights = reinterpret_cast<float*>(shared); // [ROWS][MAX_MERGED_SPLITS]
float* inv_totals = weights + ROWS * MAX_MERGED_SPLITS; // [ROWS]
const int lane_idx = threadIdx.x % WARP_LANES;
for (int r = threadIdx.x / WARP_LANES; r < live_rows; r += DECODE_WARPS) {
  const QueryRow row = block.row(r, CAUSAL);
  const float* entries = partial + (row.offset / HEAD_DIM) * num_splits * ENTRY;
  float split_max[MAX_MERGED_SPLITS / WARP_LANES];
  float row_max = NEG_INF;
#pragma unroll
  for (int k = 0; k < MAX_MERGED_SPLITS / WARP_LANES; ++k) {
    const int split = lane_idx + k * WARP_LANES;
    split_max[k] = split < num_splits ? __ldcg(entries + split * ENTRY + HEAD_DIM) : NEG_INF;
    row_max = fmaxf(row_max, split_max[k]);
  }
  const float base = usable_max(group_max<WARP_LANES>(row_max));
  float total = 0.0f;
#pragma unroll
  for (int k = 0; k < MAX_MERGED_SPLITS / WARP_LANES; ++k) {
    const int split = lane_idx + k * WARP_LANES;
    if (split < num_splits) {
      const float weight = exp2f(split_max[k] - base);
      weights[r * MAX_MERGED_SPLITS + split] = weight;
      total = fmaf(__ldcg(entries + split * ENTRY + HEAD_DIM + 1), weight, total);
    }
  }
  total = group_sum<WARP_LANES>(total);
  if (lane_idx == 0) {
    inv_totals[r] = total > 0.0f ? 1.0f / total : 0.0f;
  }
}
__syncthreads();
// 2. Each thread merges a (row, group of VEC dims): VEC = 4 reads an entry's
//    dims as float4 (entries are 16-byte aligned), MERGE_LOADS loads in flight
//    at once, summed in split order.
constexpr int VEC = HEAD_DIM % 4 == 0 ? 4 : 1;
constexpr int GROUPS = HEAD_DIM / VEC;
constexpr int MERGE_LOADS = 16;
using Vec = typename MergeLoad<VEC>::type;
for (int idx = threadIdx.x; idx < live_rows * GROUPS; idx += blockDim.x) {
  const int r = idx / GROUPS;
  const int dim = (idx % GROUPS) * VEC;
  const QueryRow row = block.row(r, CAUSAL);
  const float* entries = partial + (row.offset / HEAD_DIM) * num_splits * ENTRY + dim;
  const float* row_weights = weights + r * MAX_MERGED_SPLITS;
  float acc[VEC];
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
    acc[e] = 0.0f;
  }
  for (int first = 0; first < num_splits; first += MERGE_LOADS) {
    Vec values[MERGE_LOADS];
#pragma unroll
    for (int k = 0; k < MERGE_LOADS; ++k) {
      if (first + k < num_splits) {
        values[k] = __ldcg(reinterpret_cast<const Vec*>(entries + (first + k) * ENTRY));
      }
    }
#pragma unroll
    for (int k = 0; k < MERGE_LOADS; ++k) {
      if (first + k < num_splits) {
        const float weight = row_weights[first + k];
        const float* v = reinterpret_cast<const float*>(&values[k]);
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          acc[e] = fmaf(v[e], weight, acc[e]);
        }
      }
    }
  }
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
    out[row.offset + dim + e] = from_float<T>(acc[e] * inv_totals[r]);
  }
}
