// paged_decode_split (Metal): mirror of paged_decode_split.cu, for
// fast::metal_kernel (headers as paged_decode.metal). Template arguments as
// paged_decode.metal. Output: partial float32 [B * H_q * L, S, D + 2]. Split y
// = threadgroup_position_in_grid.y of S = threadgroups_per_grid.y.
using namespace pagecheck;
using Layout = DecodeLayout<T, HEAD_DIM, ROWS>;
threadgroup float merge[Layout::MERGE_FLOATS];

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

// ---- Walk this split's tiles --------------------------------------------------------
const TileRange tiles = split_tiles(context_len, geo.page_size, Layout::TILE_TOKENS, split_idx, num_splits);
decode_walk<T, HEAD_DIM, ROWS, CAUSAL>(
    query, key_pages, value_pages, block_table, geo, scale_of(SCALE_BITS),
    request_idx, kv_head_idx, row_begin, context_len, tiles.begin, tiles.end,
    merge, thread_index_in_simdgroup, simdgroup_index_in_threadgroup);

// ---- Store the unnormalised partial state --------------------------------------------
for (int idx = int(thread_index_in_threadgroup); idx < ROWS * HEAD_DIM; idx += DECODE_THREADS) {
  const int r = idx / HEAD_DIM;
  const int dim = idx % HEAD_DIM;
  const QueryRow row = query_row(geo, request_idx, kv_head_idx, row_begin + r, context_len, CAUSAL);
  if (row.valid) {
    const MergedState s = merged_state<ROWS, Layout::ACC_ELEMS>(merge, r, dim);
    const long slot = (row.offset / HEAD_DIM) * num_splits + split_idx;
    device float* entry = partial + slot * (HEAD_DIM + 2);
    entry[dim] = s.acc;
    if (dim == 0) {
      entry[HEAD_DIM] = s.max;
      entry[HEAD_DIM + 1] = s.sum;
    }
  }
}
