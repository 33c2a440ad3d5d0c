// paged_decode_split: first pass of split-context decode (L <= 8).
//
// Body of an MLX fast::cuda_kernel (headers as paged_decode). Template
// arguments: T, HEAD_DIM, ROWS, CAUSAL, MMA, TABLE, as paged_decode.
// Inputs: as paged_decode. Output: partial float32 [B * H_q * L, S, D + 2]:
// per row and split the unnormalised output, then the max (log2 units) and
// the sum of weights; paged_decode_reduce merges the splits. S = gridDim.y.
//
// Ownership: block (x, y) owns (request_idx, kv_head_idx, chunk_idx) as in
// paged_decode and split y: an equal share of the context's tiles (whole
// tiles, so every K/V slot is read by one block only; split_tiles in
// paged_decode_walker.cuh). It writes slot y of its rows of `partial` and
// nothing else; a split past the context writes the empty state (max -inf,
// sum 0, output 0), which the reduce weighs by zero.
// Launch: DECODE_THREADS threads per block, grid (blocks, S), dynamic shared
// memory DecodeWalker<...>::Layout::SHARED_BYTES.
using namespace pagecheck;
using Walker = DecodeWalker<T, HEAD_DIM, ROWS, CAUSAL, MMA, MMA_STAGES>;
using Layout = typename Walker::Layout;
require_shared_bytes(Layout::SHARED_BYTES);
extern __shared__ __align__(16) unsigned char shared[];

// ---- Positions -----------------------------------------------------------------
const PagedGeometry geo = make_geometry(
    query_shape.data(), key_pages_shape.data(), block_table_shape.data(), TABLE);
const RowBlock block = row_block(geo, blockIdx.x, ROWS);
const int request_idx = block.request_idx;
const int kv_head_idx = block.kv_head_idx;
const int split_idx = blockIdx.y;
const int num_splits = gridDim.y;
const int row_begin = block.row_begin;
const int context_len = request_context(geo, context_lens, request_idx);

// ---- Walk this split's tiles --------------------------------------------------------
const TileRange tiles = split_tiles(
    context_len, geo.page_size, Layout::TILE_TOKENS, split_idx, num_splits);
Walker::walk(
    query, key_pages, value_pages, block_table, geo, scale_of(SCALE_BITS),
    request_idx, kv_head_idx, row_begin, context_len,
    tiles.begin, tiles.end, shared);

// ---- Store the unnormalised partial state --------------------------------------------
const typename Layout::Merge merge(shared);
for (int idx = threadIdx.x; idx < ROWS * HEAD_DIM; idx += blockDim.x) {
  const int r = idx / HEAD_DIM;
  const int dim = idx % HEAD_DIM;
  const QueryRow row = query_row(
      geo, request_idx, kv_head_idx, row_begin + r, context_len, CAUSAL);
  if (row.valid) {
    const MergedState s = merge.merged(r, dim);
    const long long slot = (row.offset / HEAD_DIM) * num_splits + split_idx;
    float* entry = partial + slot * (HEAD_DIM + 2);
    entry[dim] = s.acc;
    if (dim == 0) {
      entry[HEAD_DIM] = s.max;
      entry[HEAD_DIM + 1] = s.sum;
    }
  }
}
