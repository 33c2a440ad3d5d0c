// paged_prefill_mma: attention for long queries (L > 8) on tensor cores.
//
// Body of an MLX fast::cuda_kernel (headers: paged_common.cuh,
// paged_mma.cuh). Template arguments: T (bfloat16 or
// float16), HEAD_DIM (a multiple of 16, at most 128), KEY_TILE (16, 32 or
// 64; the launch plan takes 64), CAUSAL, TABLE, SCALE_BITS, SCALE_NEGATIVE
// (paged_common.cuh). Inputs and output as paged_decode.
//
// Ownership: block x owns (request_idx, kv_head_idx, row_tile_idx): the
// PREFILL_ROW_TILE query rows [row_tile_idx * 64, +64) of that kv head's G * L
// rows (numbered position-major), and writes exactly those rows of `out`.
// Warp w owns rows 16w..16w+15 of the tile; lane (group, pair) holds rows
// group and group + 8 of them in the mma fragment layouts of paged_mma.cuh:
// the query fragments for all of HEAD_DIM, the running output (float32, all
// HEAD_DIM columns), and a per-lane partial of each row's running sum; the
// running max is shared by the 4 lanes of a group.
// The block walks the request's positions in key tiles of KEY_TILE positions
// (position_tile): a tile inside one page is copied from that page, a tile
// across pages row by row from each row's own page (copy_position_rows), so
// pages smaller than the tile cost no shorter tiles. All threads copy the
// tile's K and V rows with cp.async into a two-stage ring (rows padded by 8
// elements so that ldmatrix is free of bank conflicts: SharedRows in
// paged_mma.cuh; swizzled rows, which the decode walk takes where
// multiprocessors hold two blocks or more, are untimed here: one H200 run
// measured 227 us swizzled at L 512 over 4096 against 198 padded in
// another), one barrier before and one after each tile. Under the causal
// mask the walk stops after the last key the tile's last row can see.
// Launch: 128 threads per block, blocks = B * H_kv * ceil(G * L / 64),
// dynamic shared memory 4 * KEY_TILE * (HEAD_DIM + 8) * sizeof(T).
using namespace pagecheck;
constexpr int THREADS = 128;
constexpr int ROW_TILE = 64;
using Rows = SharedRows<HEAD_DIM, false>;
constexpr int S_TILES = KEY_TILE / 8;
constexpr int QK_CHUNKS = HEAD_DIM / 16;
constexpr int O_TILES = HEAD_DIM / 8;
constexpr int PV_CHUNKS = KEY_TILE / 16;
constexpr int STAGE_ELEMS = KEY_TILE * Rows::STRIDE;
constexpr int SHARED_BYTES = 4 * STAGE_ELEMS * static_cast<int>(sizeof(T));
static_assert(HEAD_DIM % 16 == 0 && HEAD_DIM <= 128, "HEAD_DIM");
static_assert(KEY_TILE % 16 == 0 && KEY_TILE <= 64, "KEY_TILE");
require_shared_bytes(SHARED_BYTES);
extern __shared__ __align__(128) unsigned char shared[];
T* k_ring = reinterpret_cast<T*>(shared);
T* v_ring = k_ring + 2 * STAGE_ELEMS;

// ---- Positions -----------------------------------------------------------------
const PagedGeometry geo = make_geometry(
    query_shape.data(), key_pages_shape.data(), block_table_shape.data(), TABLE);
const WarpRows warp = warp_rows(geo, context_lens, ROW_TILE, CAUSAL);
const int request_idx = warp.request_idx;
const int kv_head_idx = warp.kv_head_idx;
const int pair_idx = warp.pair_idx;
const int row_first = warp.row_first;
const int context_len = warp.context_len;
const QueryRow (&rows)[2] = warp.rows;
const int lane_idx = threadIdx.x % WARP_LANES;
unsigned q_frag[QK_CHUNKS][4];
load_query_fragments(q_frag, query, rows, pair_idx);
const float score_scale = scale_of(SCALE_BITS, SCALE_NEGATIVE) * LOG2_E;

// ---- Key range: the causal limit of the tile's last row bounds the walk ------------
const int pos_end = row_tile_key_end(geo, request_idx, kv_head_idx, row_first, ROW_TILE, context_len, CAUSAL);
const int num_tiles = pos_end > 0 ? ceil_div(pos_end, KEY_TILE) : 0;
const int32_t* table_row =
    block_table + static_cast<long long>(request_idx) * geo.max_pages;
const bool vector_copy = is_aligned16(key_pages) && is_aligned16(value_pages);

auto tile_of = [&](int tile_idx) {
  return position_tile(tile_idx, KEY_TILE, geo.page_size, pos_end);
};

// All threads copy one tile's K and V rows into ring stage `stage`.
auto issue = [&](int tile_idx, int stage) {
  copy_key_tile<T, HEAD_DIM, KEY_TILE, Rows, THREADS>(geo, table_row, warp, tile_of(tile_idx), key_pages,
                                                     value_pages, k_ring + stage * STAGE_ELEMS,
                                                     v_ring + stage * STAGE_ELEMS, vector_copy, threadIdx.x);
};

float out_acc[O_TILES][4];
#pragma unroll
for (int nt = 0; nt < O_TILES; ++nt) {
#pragma unroll
  for (int part = 0; part < 4; ++part) {
    out_acc[nt][part] = 0.0f;
  }
}
float run_max[2] = {NEG_INF, NEG_INF};
float run_sum[2] = {0.0f, 0.0f};

// ---- Walk the key tiles, one copy in flight ahead of the one consumed ---------------
if (num_tiles > 0) {
  issue(0, 0);
}
commit_async();
for (int tile_idx = 0; tile_idx < num_tiles; ++tile_idx) {
  if (tile_idx + 1 < num_tiles) {
    issue(tile_idx + 1, (tile_idx + 1) % 2);
  }
  commit_async();
  wait_async<1>();
  __syncthreads();

  const PageTile tile = tile_of(tile_idx);
  const T* stage_k = k_ring + (tile_idx % 2) * STAGE_ELEMS;
  const T* stage_v = v_ring + (tile_idx % 2) * STAGE_ELEMS;

  // Scores S = Q K^T for this warp's 16 rows and the tile's KEY_TILE keys.
  float score[S_TILES][4];
#pragma unroll
  for (int nt = 0; nt < S_TILES; ++nt) {
#pragma unroll
    for (int part = 0; part < 4; ++part) {
      score[nt][part] = 0.0f;
    }
    const int key_row = nt * 8 + lane_idx % 8;
#pragma unroll
    for (int kc = 0; kc + 1 < QK_CHUNKS; kc += 2) {
      unsigned b[4];
      load_matrix_x4(b, stage_k + Rows::at(key_row, 2 * kc + lane_idx / 8));
      mma_16816(score[nt], q_frag[kc], b[0], b[1], T{});
      mma_16816(score[nt], q_frag[kc + 1], b[2], b[3], T{});
    }
    if constexpr (QK_CHUNKS % 2 == 1) {
      unsigned b[2];
      load_matrix_x2(b, stage_k + Rows::at(key_row, 2 * (QK_CHUNKS - 1) + (lane_idx / 8) % 2));
      mma_16816(score[nt], q_frag[QK_CHUNKS - 1], b[0], b[1], T{});
    }
  }

  fragment_softmax(score, out_acc, run_max, run_sum, rows, tile, pair_idx, score_scale);

  // Output += P V: the score accumulators of key tiles 2kc, 2kc+1 are the A
  // fragment of key chunk kc.
#pragma unroll
  for (int kc = 0; kc < PV_CHUNKS; ++kc) {
    const unsigned p_frag[4] = {
        pack_pair(score[2 * kc][0], score[2 * kc][1], T{}),
        pack_pair(score[2 * kc][2], score[2 * kc][3], T{}),
        pack_pair(score[2 * kc + 1][0], score[2 * kc + 1][1], T{}),
        pack_pair(score[2 * kc + 1][2], score[2 * kc + 1][3], T{})};
    const int value_row = kc * 16 + lane_idx % 8 + ((lane_idx / 8) % 2) * 8;
#pragma unroll
    for (int nt = 0; nt < O_TILES; nt += 2) {
      unsigned b[4];
      load_matrix_x4_trans(b, stage_v + Rows::at(value_row, nt + lane_idx / 16));
      mma_16816(out_acc[nt], p_frag, b[0], b[1], T{});
      mma_16816(out_acc[nt + 1], p_frag, b[2], b[3], T{});
    }
  }
  __syncthreads();
}
wait_async<0>();

// ---- Normalise and store -------------------------------------------------------------
store_rows(out, out_acc, run_sum, rows, pair_idx);
