// paged_decode_split (Metal): mirror of paged_decode_split.cu, for
// fast::metal_kernel (headers as paged_decode.metal, plus
// paged_decode_split_scratch.metal.h). Template arguments as
// paged_decode.metal. Output: scratch, float32 words laid out by
// split_scratch. Split y = threadgroup_position_in_grid.y of
// S = threadgroups_per_grid.y. The last threadgroup of each column to draw a
// ticket merges the S partials of its rows into the output region, in split
// order. The device-scope fence needs Metal 3.2 (macOS 15).
using namespace pagecheck;
using Layout = DecodeLayout<T, HEAD_DIM, ROWS>;
threadgroup float merge[Layout::MERGE_FLOATS];
threadgroup bool merges_splits;

// ---- Positions -----------------------------------------------------------------
const PagedGeometry geo = make_geometry(query_shape, key_pages_shape, block_table_shape, TABLE);
const int row_chunks = ceil_div(geo.rows, ROWS);
const int block_idx = int(threadgroup_position_in_grid.x);
const int request_idx = block_idx / (geo.num_kv_heads * row_chunks);
const int kv_head_idx = (block_idx / row_chunks) % geo.num_kv_heads;
const int chunk_idx = block_idx % row_chunks;
const int split_idx = int(threadgroup_position_in_grid.y);
const int num_splits = int(threadgroups_per_grid.y);
const int row_begin = chunk_idx * ROWS;
const int context_len = request_context(geo, context_lens, request_idx);
const long total_rows = long(geo.batch) * geo.num_q_heads * geo.num_queries;
const SplitScratch layout = split_scratch(
    total_rows, num_splits, HEAD_DIM, long(threadgroups_per_grid.x), int(sizeof(T)));
device float* partial = scratch;
device atomic_uint* counters = reinterpret_cast<device atomic_uint*>(scratch + layout.counters);
device T* out = reinterpret_cast<device T*>(scratch + layout.out_begin);
constexpr int ENTRY = partial_entry(HEAD_DIM);

// ---- Walk this split's tiles --------------------------------------------------------
const TileRange tiles = split_tiles(context_len, geo.page_size, Layout::TILE_TOKENS, split_idx, num_splits);
decode_walk<T, HEAD_DIM, ROWS, CAUSAL>(
    query, key_pages, value_pages, block_table, geo, scale_of(SCALE_BITS, SCALE_NEGATIVE),
    request_idx, kv_head_idx, row_begin, context_len, tiles.begin, tiles.end,
    merge, thread_index_in_simdgroup, simdgroup_index_in_threadgroup);

// ---- Store the unnormalised partial state --------------------------------------------
// Only the live rows (rows row_begin + r < geo.rows, a prefix of the block's).
const int live_rows = min(ROWS, geo.rows - row_begin);
for (int idx = int(thread_index_in_threadgroup); idx < live_rows * HEAD_DIM; idx += DECODE_THREADS) {
  const int r = idx / HEAD_DIM;
  const int dim = idx % HEAD_DIM;
  const QueryRow row = query_row(geo, request_idx, kv_head_idx, row_begin + r, context_len, CAUSAL);
  const MergedState s = merged_state<ROWS, Layout::ACC_ELEMS>(merge, r, dim);
  device float* entry = partial + ((row.offset / HEAD_DIM) * num_splits + split_idx) * ENTRY;
  entry[dim] = s.acc;
  if (dim == 0) {
    entry[HEAD_DIM] = s.max;
    entry[HEAD_DIM + 1] = s.sum;
  }
}

// ---- The last threadgroup of the column merges the splits ------------------------------
// One fence a threadgroup, by thread 0 after the barrier that orders the
// group's partial stores before it, then the ticket; the merging group's
// thread 0 fences again so that its threads' reads see every split's stores.
threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
if (thread_index_in_threadgroup == 0) {
  atomic_thread_fence(mem_flags::mem_device, memory_order_seq_cst, thread_scope_device);
  const uint start = as_type<uint>(scratch[layout.base]);
  const uint ticket = atomic_fetch_add_explicit(counters + block_idx, 1u, memory_order_relaxed) - start;
  merges_splits = ticket == uint(num_splits - 1);
  if (merges_splits) {
    atomic_thread_fence(mem_flags::mem_device, memory_order_seq_cst, thread_scope_device);
  }
}
threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
if (!merges_splits) {
  return;
}
// Each thread merges a (row, group of VEC dims) on its own, in split order:
// for each chunk of MERGE_LOADS splits it issues every load before summing
// (VEC = 4 reads an entry's dims as float4, entries being 16-byte aligned).
// Weights are 2^(max_s - base) for the largest max seen so far; a later chunk
// with a larger max rescales what came before.
constexpr int VEC = HEAD_DIM % 4 == 0 ? 4 : 1;
constexpr int GROUPS = HEAD_DIM / VEC;
constexpr int MERGE_LOADS = 16;
for (int idx = int(thread_index_in_threadgroup); idx < live_rows * GROUPS; idx += DECODE_THREADS) {
  const int r = idx / GROUPS;
  const int dim = (idx % GROUPS) * VEC;
  const QueryRow row = query_row(geo, request_idx, kv_head_idx, row_begin + r, context_len, CAUSAL);
  const device float* entries = partial + (row.offset / HEAD_DIM) * num_splits * ENTRY;
  float4 acc = float4(0.0f);
  float total = 0.0f;
  float running_max = -INFINITY;
  for (int first = 0; first < num_splits; first += MERGE_LOADS) {
    float4 values[MERGE_LOADS];
    float split_max[MERGE_LOADS];
    float split_sum[MERGE_LOADS];
    for (int k = 0; k < MERGE_LOADS; ++k) {
      split_max[k] = -INFINITY;
      split_sum[k] = 0.0f;
      if (first + k < num_splits) {
        const device float* entry = entries + (first + k) * ENTRY;
        values[k] = VEC == 4 ? *reinterpret_cast<const device float4*>(entry + dim)
                             : float4(entry[dim], 0.0f, 0.0f, 0.0f);
        split_max[k] = entry[HEAD_DIM];
        split_sum[k] = entry[HEAD_DIM + 1];
      }
    }
    float chunk_max = running_max;
    for (int k = 0; k < MERGE_LOADS; ++k) {
      chunk_max = metal::max(chunk_max, split_max[k]);
    }
    const float base = usable_max(chunk_max);
    // What the earlier chunks summed, reweighted to this base (nothing yet: 0).
    const float carry = running_max == -INFINITY ? 0.0f : metal::exp2(running_max - base);
    total *= carry;
    acc *= carry;
    for (int k = 0; k < MERGE_LOADS; ++k) {
      if (first + k < num_splits) {
        const float weight = metal::exp2(split_max[k] - base);
        total = metal::fma(split_sum[k], weight, total);
        acc = metal::fma(values[k], float4(weight), acc);
      }
    }
    running_max = chunk_max;
  }
  const float inv_total = total > 0.0f ? 1.0f / total : 0.0f;
  for (int e = 0; e < VEC; ++e) {
    out[row.offset + dim + e] = static_cast<T>(acc[e] * inv_total);
  }
}
