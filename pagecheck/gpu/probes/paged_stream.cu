// paged_stream: read every K/V slot of each (request, kv head) and nothing
// else. What it measures is how fast a copy mechanism can stream a paged
// pool without the attention math (pagecheck/gpu_stream_probe.py), so a
// kernel's distance from it is the cost of the math and of its scheduling.
//
// Body of an MLX fast::cuda_kernel; headers paged_common.cuh, paged_mma.cuh,
// paged_bulk_copy.cuh, paged_decode_merge.cuh (DECODE_WARPS, warp tiles).
// Template arguments: T, HEAD_DIM (a multiple of 8), STAGES (ring depth),
// MODE:
//   0, 1  a ring per warp, as the tensor-core decode walk: 16-token tiles
//         into shared rows (SharedRows: swizzled for cp.async, padded for
//         bulk copies), warp w taking tiles w, w + DECODE_WARPS, ...; filled
//         by cp.async (0) or bulk row copies (1);
//   5     mode 0 with rows padded by 8 elements (the cost of padding on
//         the copies);
//   2     plain 16-byte loads into registers, same tiles, no shared memory;
//   3, 4  one ring per block: 64-token tiles (never crossing a page) that
//         all threads fill together, by cp.async (3) or bulk row copies (4),
//         the same bytes of shared memory as modes 0 and 1.
// A ring waits on a tile with STAGES tiles in flight, as the walk does; with
// no math, refilling its stage before or after reading it is the same.
// Inputs: key_pages / value_pages [P, H_kv, page, D], block_table int32
// [B, max_pages] (valid ids), context_lens int32 [B]. Output: checksum
// float32 [blocks * DECODE_THREADS], one per thread so the loads cannot be
// dropped. Block x owns (request x / H_kv, kv head x % H_kv).
using namespace pagecheck;
constexpr bool BLOCK_RING = MODE >= 3;
constexpr int TILE = BLOCK_RING ? 16 * DECODE_WARPS : 16;
constexpr bool BULK = MODE == 1 || MODE == 4;
using Rows = SharedRows<HEAD_DIM, !BULK && MODE != 5>;
constexpr int STAGE_ELEMS = 2 * TILE * Rows::STRIDE;
// On a 128-byte line like the decode walk's ring (paged_decode_split.cu says
// why), whatever static shared memory the mode keeps.
extern __shared__ __align__(128) unsigned char shared[];
__shared__ unsigned long long barriers[DECODE_WARPS * STAGES];

const int lane_idx = threadIdx.x % WARP_LANES;
const int warp_idx = threadIdx.x / WARP_LANES;
const int num_kv_heads = key_pages_shape[1];
const int page_size = key_pages_shape[2];
const int request_idx = blockIdx.x / num_kv_heads;
const int kv_head_idx = blockIdx.x % num_kv_heads;
const int context_len = context_lens[request_idx];
const int tiles_per_page = ceil_div(page_size, TILE);
const int total_tiles = count_tiles(context_len, page_size, TILE, tiles_per_page);
const TileDivisor tile_divisor(tiles_per_page);
// Who walks which tiles: the whole block every tile, or warp w every DECODE_WARPS-th from w.
const int first_tile = BLOCK_RING ? 0 : warp_idx;
const int tile_step = BLOCK_RING ? 1 : DECODE_WARPS;
const int my_tiles = BLOCK_RING ? total_tiles : warp_tile_count(0, total_tiles, warp_idx);
const int owner = BLOCK_RING ? static_cast<int>(threadIdx.x) : lane_idx;
// The launch has DECODE_WARPS warps a block (stream_probe.py).
constexpr int OWNERS = BLOCK_RING ? DECODE_THREADS : WARP_LANES;
const int32_t* table_row = block_table + static_cast<long long>(request_idx) * block_table_shape[1];
T* ring = reinterpret_cast<T*>(shared) + (BLOCK_RING ? 0 : warp_idx * STAGES * STAGE_ELEMS);
unsigned folded = 0;

auto tile_of = [&](int local) {
  return page_tile(first_tile + local * tile_step, TILE, tile_divisor, page_size, context_len);
};
auto tile_base = [&](const PageTile& tile) {
  return (static_cast<long long>(table_row[tile.page_idx]) * num_kv_heads + kv_head_idx) * page_size * HEAD_DIM +
      static_cast<long long>(tile.slot_begin) * HEAD_DIM;
};
auto barrier_of = [&](int local) { return &barriers[(BLOCK_RING ? 0 : warp_idx * STAGES) + local % STAGES]; };
auto ring_sync = [&]() {
  if constexpr (BLOCK_RING) {
    __syncthreads();
  } else {
    __syncwarp();
  }
};

if constexpr (MODE == 2) {
  constexpr int CHUNKS = TILE * HEAD_DIM / 8; // 16-byte chunks of K (and of V) per tile
  for (int local = 0; local < my_tiles; ++local) {
    const PageTile tile = tile_of(local);
    const long long base = tile_base(tile);
    uint4 k[CHUNKS / WARP_LANES];
    uint4 v[CHUNKS / WARP_LANES];
#pragma unroll
    for (int i = 0; i < CHUNKS / WARP_LANES; ++i) {
      const int chunk = lane_idx + i * WARP_LANES;
      const bool live = chunk / (HEAD_DIM / 8) < tile.count;
      const long long at = base + static_cast<long long>(chunk) * 8;
      k[i] = live ? *reinterpret_cast<const uint4*>(key_pages + at) : make_uint4(0u, 0u, 0u, 0u);
      v[i] = live ? *reinterpret_cast<const uint4*>(value_pages + at) : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int i = 0; i < CHUNKS / WARP_LANES; ++i) {
      folded ^= k[i].x ^ k[i].w ^ v[i].y ^ v[i].z;
    }
  }
} else {
  if constexpr (BULK) {
    init_stage_barriers(barrier_of(0), STAGES, owner);
    ring_sync();
  }
  auto issue = [&](int local) {
    const PageTile tile = tile_of(local);
    T* stage_k = ring + (local % STAGES) * STAGE_ELEMS;
    T* stage_v = stage_k + TILE * Rows::STRIDE;
    fill_stage<BULK, T, HEAD_DIM, TILE, Rows, OWNERS>(
        stage_k, stage_v, key_pages, value_pages, tile_base(tile), tile.count, true, true, barrier_of(local), owner);
  };
  for (int local = 0; local < STAGES - 1; ++local) {
    if (local < my_tiles) {
      issue(local);
    }
    commit_async();
  }
  for (int local = 0; local < my_tiles; ++local) {
    if (local + STAGES - 1 < my_tiles) {
      issue(local + STAGES - 1);
    }
    commit_async();
    wait_stage<BULK, STAGES>(barrier_of(local), local);
    ring_sync();
    const T* stage = ring + (local % STAGES) * STAGE_ELEMS;
    const uint4 word = *reinterpret_cast<const uint4*>(stage + Rows::at(owner % (2 * TILE), 0));
    folded ^= word.x ^ word.w;
    ring_sync();
  }
  wait_async<0>();
}
checksum[blockIdx.x * blockDim.x + threadIdx.x] = static_cast<float>(folded & 0xffffu);
