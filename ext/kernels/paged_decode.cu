// paged_decode: attention for short queries (L <= 8) in one pass per row.
//
// Body of an MLX fast::cuda_kernel (MLX writes the signature from the input
// and output names; headers: paged_common.cuh, paged_mma.cuh and the
// paged_decode_*.cuh walk headers).
// Template arguments: T (storage dtype), HEAD_DIM, ROWS (query rows per
// block: a power of two up to 8 for the CUDA-core walk, 16 for the tensor-core
// walk), CAUSAL, MMA (which walk, paged_decode_walker.cuh), MMA_STAGES
// (ring stages of the tensor-core walk), MMA_BULK (its ring filled by bulk
// copies), MMA_SWIZZLE (its rows swizzled rather than padded: SharedRows in
// paged_mma.cuh; the plan picks), TABLE (where pages and contexts come
// from, paged_common.cuh), SCALE_BITS and SCALE_NEGATIVE (the softmax scale,
// scale_of).
// Inputs: query [B, H_q, L, D], key_pages / value_pages [P, H_kv, page, D],
// block_table int32 [B, max_pages], context_lens int32 [B]. The softmax scale is the
// template arguments SCALE_BITS and SCALE_NEGATIVE (see scale_of).
// Output: out [B, H_q, L, D] in T.
//
// Ownership: block x owns (request_idx, kv_head_idx, chunk_idx): rows
// [chunk_idx * ROWS, chunk_idx * ROWS + ROWS) of that kv head's G * L query
// rows, over every page of the request's context. It reads each of those
// pages' K/V slots once, for all its rows, and writes exactly its rows of
// `out`; no other block touches them. A context of 0 writes zeros.
// Launch: DECODE_THREADS threads per block, blocks = B * H_kv * row_chunks,
// dynamic shared memory DecodeWalker<...>::Layout::SHARED_BYTES.
using namespace pagecheck;
using Walker = DecodeWalker<T, HEAD_DIM, ROWS, CAUSAL, MMA, MMA_STAGES, MMA_BULK, MMA_SWIZZLE>;
using Layout = typename Walker::Layout;
require_shared_bytes(Layout::SHARED_BYTES);
// On a 128-byte line, as SharedRows' swizzle assumes (paged_decode_split.cu).
extern __shared__ __align__(128) unsigned char shared[];

// ---- Walk every tile of the context ----------------------------------------------
const DecodeBlock block = decode_block(
    make_geometry(query_shape.data(), key_pages_shape.data(), block_table_shape.data(), TABLE),
    context_lens, ROWS);
walk_decode_block<Walker>(
    block, query, key_pages, value_pages, block_table, scale_of(SCALE_BITS, SCALE_NEGATIVE), 0, 1, shared);

// ---- Normalise and store this block's rows ------------------------------------------
// Only the live rows: the walk may leave the others unpublished.
const typename Layout::Merge merge(shared);
const int live_rows = block.live_rows(ROWS);
for (int idx = threadIdx.x; idx < live_rows * HEAD_DIM; idx += blockDim.x) {
  const int r = idx / HEAD_DIM;
  const int dim = idx % HEAD_DIM;
  const QueryRow row = block.row(r, CAUSAL);
  const MergedState s = merge.merged(r, dim);
  out[row.offset + dim] = from_float<T>(s.sum > 0.0f ? s.acc / s.sum : 0.0f);
}
