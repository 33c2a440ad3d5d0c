// paged_decode (Metal): mirror of paged_decode.cu, for fast::metal_kernel
// (headers: paged_common.metal.h, paged_decode_walk.metal.h). Template
// arguments: T, HEAD_DIM (at most 128 on Metal), ROWS, CAUSAL, MMA (always
// false here), MMA_STAGES (unused: no tensor-core walk), TABLE, SCALE_BITS, SCALE_NEGATIVE.
// Inputs, output, ownership and launch as the CUDA kernel;
// the merge region is threadgroup memory declared here.
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
const int row_begin = chunk_idx * ROWS;
const int context_len = request_context(geo, context_lens, request_idx);

// ---- Walk every tile of the context ----------------------------------------------
const TileRange tiles = split_tiles(context_len, geo.page_size, Layout::TILE_TOKENS, 0, 1);
decode_walk<T, HEAD_DIM, ROWS, CAUSAL>(
    query, key_pages, value_pages, block_table, geo, scale_of(SCALE_BITS, SCALE_NEGATIVE),
    request_idx, kv_head_idx, row_begin, context_len, tiles.begin, tiles.end,
    merge, thread_index_in_simdgroup, simdgroup_index_in_threadgroup);

// ---- Normalise and store this block's rows ------------------------------------------
// Only the live rows (rows row_begin + r < geo.rows, a prefix of the block's).
const int live_rows = min(ROWS, geo.rows - row_begin);
for (int idx = int(thread_index_in_threadgroup); idx < live_rows * HEAD_DIM; idx += DECODE_THREADS) {
  const int r = idx / HEAD_DIM;
  const int dim = idx % HEAD_DIM;
  const QueryRow row = query_row(geo, request_idx, kv_head_idx, row_begin + r, context_len, CAUSAL);
  const MergedState s = merged_state<ROWS, Layout::ACC_ELEMS>(merge, r, dim);
  out[row.offset + dim] = static_cast<T>(s.sum > 0.0f ? s.acc / s.sum : 0.0f);
}
