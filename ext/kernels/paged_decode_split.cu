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
// One fence a block, by thread 0 after the barrier that orders the block's
// partial stores before it (as a grid-wide barrier does): fenced stores, then
// the ticket. The merging block's thread 0 fences again after its ticket, so
// that its threads' reads, after the next barrier, see every split's stores.
__syncthreads();
if (threadIdx.x == 0) {
  __threadfence();
  const unsigned start = counters[layout.base - layout.counters];
  const unsigned ticket = atomicAdd(counters + blockIdx.x, 1u) - start;
  merges_splits = ticket == static_cast<unsigned>(num_splits - 1);
  if (merges_splits) {
    __threadfence();
  }
}
__syncthreads();
if (!merges_splits) {
  return;
}
// Other blocks wrote the partials: read them from L2 (__ldcg), not L1.
// Each thread merges a (row, group of VEC dims) on its own, in split order:
// for each chunk of MERGE_LOADS splits it issues every load at once (a
// split's max and sum as one pair, its dims as one Vec; VEC = 4 reads them as
// float4, entries being 16-byte aligned), so a merge of at most MERGE_LOADS
// splits waits on L2 once. Weights are 2^(max_s - base) for the largest max
// seen so far; a later chunk with a larger max rescales what came before.
constexpr int VEC = HEAD_DIM % 4 == 0 ? 4 : 1;
constexpr int GROUPS = HEAD_DIM / VEC;
constexpr int MERGE_LOADS = 16;
using Vec = typename MergeLoad<VEC>::type;
for (int idx = threadIdx.x; idx < live_rows * GROUPS; idx += blockDim.x) {
  const int r = idx / GROUPS;
  const int dim = (idx % GROUPS) * VEC;
  const QueryRow row = block.row(r, CAUSAL);
  const float* entries = partial + (row.offset / HEAD_DIM) * num_splits * ENTRY;
  float acc[VEC];
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
    acc[e] = 0.0f;
  }
  float total = 0.0f;
  float running_max = NEG_INF;
  for (int first = 0; first < num_splits; first += MERGE_LOADS) {
    Vec values[MERGE_LOADS];
    float split_max[MERGE_LOADS];
    float split_sum[MERGE_LOADS];
#pragma unroll
    for (int k = 0; k < MERGE_LOADS; ++k) {
      split_max[k] = NEG_INF;
      split_sum[k] = 0.0f;
      if (first + k < num_splits) {
        const float* entry = entries + (first + k) * ENTRY;
        values[k] = __ldcg(reinterpret_cast<const Vec*>(entry + dim));
        const float2 stats = load_split_stats<HEAD_DIM>(entry);
        split_max[k] = stats.x;
        split_sum[k] = stats.y;
      }
    }
    float chunk_max = running_max;
#pragma unroll
    for (int k = 0; k < MERGE_LOADS; ++k) {
      chunk_max = fmaxf(chunk_max, split_max[k]);
    }
    const float base = usable_max(chunk_max);
    // What the earlier chunks summed, reweighted to this base (nothing yet: 0).
    const float carry = running_max == NEG_INF ? 0.0f : exp2f(running_max - base);
    total *= carry;
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      acc[e] *= carry;
    }
#pragma unroll
    for (int k = 0; k < MERGE_LOADS; ++k) {
      if (first + k < num_splits) {
        const float weight = exp2f(split_max[k] - base);
        total = fmaf(split_sum[k], weight, total);
        const float* v = reinterpret_cast<const float*>(&values[k]);
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          acc[e] = fmaf(v[e], weight, acc[e]);
        }
      }
    }
    running_max = chunk_max;
  }
  const float inv_total = total > 0.0f ? 1.0f / total : 0.0f;
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
    out[row.offset + dim + e] = from_float<T>(acc[e] * inv_total);
  }
}
