// Which decode walk a kernel instantiation runs: the template argument MMA
// picks the tensor-core walk (16-bit dtypes, HEAD_DIM % 16 == 0, <= 128, 16
// rows per block) or the CUDA-core walk (everything else); MMA_SWIZZLE the
// tensor-core ring's row layout (SharedRows, paged_mma.cuh). Only the chosen
// specialisation is instantiated, so a float32 kernel never sees mma code.
#ifndef PAGECHECK_PAGED_DECODE_WALKER_CUH
#define PAGECHECK_PAGED_DECODE_WALKER_CUH

namespace pagecheck {

template <typename T, int HEAD_DIM, int ROWS, bool CAUSAL, bool MMA, int MMA_STAGES, bool MMA_BULK, bool MMA_SWIZZLE>
struct DecodeWalker;

template <typename T, int HEAD_DIM, int ROWS, bool CAUSAL, int MMA_STAGES, bool MMA_BULK, bool MMA_SWIZZLE>
struct DecodeWalker<T, HEAD_DIM, ROWS, CAUSAL, false, MMA_STAGES, MMA_BULK, MMA_SWIZZLE> {
  using Layout = DecodeLayout<T, HEAD_DIM, ROWS>;
  template <typename... Args>
  __device__ static void walk(Args... args) {
    decode_walk<T, HEAD_DIM, ROWS, CAUSAL>(args...);
  }
};

template <typename T, int HEAD_DIM, int ROWS, bool CAUSAL, int MMA_STAGES, bool MMA_BULK, bool MMA_SWIZZLE>
struct DecodeWalker<T, HEAD_DIM, ROWS, CAUSAL, true, MMA_STAGES, MMA_BULK, MMA_SWIZZLE> {
  static_assert(ROWS == DECODE_MMA_ROWS, "the tensor-core walk takes 16 rows");
  using Layout = DecodeMmaLayout<T, HEAD_DIM, MMA_STAGES, MMA_BULK, MMA_SWIZZLE>;
  template <typename... Args>
  __device__ static void walk(Args... args) {
    decode_walk_mma<T, HEAD_DIM, CAUSAL, MMA_STAGES, MMA_BULK, MMA_SWIZZLE>(args...);
  }
};

// The split of a row's context: split_idx of num_splits takes an equal share
// of the tiles, rounded up to a whole number of tiles per warp.
struct TileRange {
  int begin;
  int end;
};

__device__ __forceinline__ TileRange split_tiles(
    int context_len,
    int page_size,
    int tile_tokens,
    int split_idx,
    int num_splits) {
  const int tiles_per_page = ceil_div(page_size, tile_tokens);
  const int total = count_tiles(context_len, page_size, tile_tokens, tiles_per_page);
  const int share = ceil_div(ceil_div(total, num_splits), DECODE_WARPS) * DECODE_WARPS;
  TileRange range;
  range.begin = min(total, split_idx * share);
  range.end = min(total, range.begin + share);
  return range;
}

// The walk of paged_decode and paged_decode_split: the block's share
// split_idx of num_splits of its context (one share: the whole context),
// leaving the warps' states in DecodeMerge's shared layout.
template <typename Walker, typename T>
__device__ __forceinline__ void walk_decode_block(
    const DecodeBlock& block,
    const T* query,
    const T* key_pages,
    const T* value_pages,
    const int32_t* block_table,
    float scale,
    int split_idx,
    int num_splits,
    unsigned char* shared) {
  const TileRange tiles = split_tiles(
      block.context_len, block.geo.page_size, Walker::Layout::TILE_TOKENS, split_idx, num_splits);
  Walker::walk(query, key_pages, value_pages, block_table, block, scale, tiles.begin, tiles.end, shared);
}

} // namespace pagecheck

#endif // PAGECHECK_PAGED_DECODE_WALKER_CUH
