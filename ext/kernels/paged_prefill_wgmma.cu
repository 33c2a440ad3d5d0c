// paged_prefill_wgmma: attention for long queries (L > 8) on Hopper's
// warpgroup tensor cores (wgmma, sm_90a).
//
// Body of a kernel the op compiles itself (NVRTC, compute_90a; nvrtc_compile.h)
// and runs through MLX's precompiled_cuda_kernel; headers: paged_common.cuh,
// paged_mma.cuh, paged_wgmma.cuh. The entry point (gpu_dispatch.cpp) takes
// the pointers query, key_pages, value_pages, block_table, context_lens and
// out as paged_decode does, then the ints batch, num_q_heads, num_queries,
// head_dim, num_pages, num_kv_heads, page_size, max_pages (the shapes the
// other kernels read). Constants: T (bfloat16 or float16), HEAD_DIM (64 or
// 128), KEY_TILE (64 or 128), STAGES (ring depth, at least 2), WARPGROUPS
// (1 to 3), CAUSAL, TABLE, SCALE_BITS, SCALE_NEGATIVE (paged_common.cuh).
//
// Ownership: block x owns (request_idx, kv_head_idx, row_tile_idx), the
// 64 * WARPGROUPS query rows [row_tile_idx * 64 * WARPGROUPS, +64 *
// WARPGROUPS) of that kv head's G * L rows (numbered position-major), and
// writes exactly those rows of `out`. Warpgroup g owns 64 of them; its warp w
// rows 16w..16w+15 of those, with their query fragments, running output
// (float32), max and sum in registers, in the layouts of paged_mma.cuh.
// The block walks the request's positions in key tiles of KEY_TILE
// positions (position_tile: a tile inside one page is copied from that page,
// a tile across pages row by row). All threads copy a tile's K and V rows
// with cp.async into a ring of STAGES stages in the swizzled layout of
// paged_wgmma.cuh (Sw128Rows), STAGES - 1 tiles ahead of the one consumed.
// Per tile each warpgroup computes S = Q K^T as one wgmma chain over the head
// dim, warpgroup_softmax turns S into weights in place (without the causal
// and length cut where every row sees the whole tile), and O += P V is one
// wgmma chain over the tile's keys, the weights packed as A fragments. The
// warpgroups of a block, at one block per multiprocessor, take turns on the
// tensor cores while the other runs its softmax. Under the causal mask the
// walk stops after the last key the block's last row can see.
// Launch: 128 * WARPGROUPS threads per block, blocks = B * H_kv * ceil(G * L
// / (64 * WARPGROUPS)), dynamic shared memory 2 * STAGES * KEY_TILE *
// HEAD_DIM * sizeof(T) + 1024 (the ring, aligned to 1024 bytes inside it).
using namespace pagecheck;
constexpr int THREADS = 128 * WARPGROUPS;
constexpr int ROW_TILE = 64 * WARPGROUPS;
using Rows = Sw128Rows<KEY_TILE>;
constexpr int S_TILES = KEY_TILE / 8;
constexpr int QK_CHUNKS = HEAD_DIM / 16;
constexpr int O_TILES = HEAD_DIM / 8;
constexpr int PV_CHUNKS = KEY_TILE / 16;
constexpr int STAGE_ELEMS = KEY_TILE * HEAD_DIM;
constexpr int STAGE_BYTES = STAGE_ELEMS * static_cast<int>(sizeof(T));
constexpr int SHARED_BYTES = 2 * STAGES * STAGE_BYTES + 1024;
static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "HEAD_DIM");
static_assert(KEY_TILE == 64 || KEY_TILE == 128, "KEY_TILE");
static_assert(STAGES >= 2, "STAGES");
static_assert(WARPGROUPS >= 1 && WARPGROUPS <= 3, "WARPGROUPS");
// The guard of require_shared_bytes without its printf: a call anywhere in
// the kernel makes ptxas serialize every wgmma.
if (dynamic_shared_bytes() < SHARED_BYTES) {
  __trap();
}
extern __shared__ __align__(1024) unsigned char shared[];
// Swizzled column blocks must start on 1024-byte boundaries.
const unsigned shared_base = shared_address(shared);
T* k_ring = reinterpret_cast<T*>(shared + ((1024 - (shared_base & 1023)) & 1023));
T* v_ring = k_ring + STAGES * STAGE_ELEMS;

// ---- Positions -----------------------------------------------------------------
// The shapes the other kernels read from MLX's signature, from the int parameters.
const int query_dims[4] = {batch, num_q_heads, num_queries, head_dim};
const int pool_dims[4] = {num_pages, num_kv_heads, page_size, head_dim};
const int table_dims[2] = {batch, max_pages};
const PagedGeometry geo = make_geometry(query_dims, pool_dims, table_dims, TABLE);
const WarpRows warp = warp_rows(geo, context_lens, ROW_TILE, CAUSAL);
unsigned q_frag[QK_CHUNKS][4];
load_query_fragments(q_frag, query, warp.rows, warp.pair_idx);
const float score_scale = scale_of(SCALE_BITS, SCALE_NEGATIVE) * LOG2_E;
constexpr bool POSITIVE_SCALE = !SCALE_NEGATIVE;

// ---- Key range -----------------------------------------------------------------------
const int pos_end =
    row_tile_key_end(geo, warp.request_idx, warp.kv_head_idx, warp.row_first, ROW_TILE, warp.context_len, CAUSAL);
const int num_tiles = pos_end > 0 ? ceil_div(pos_end, KEY_TILE) : 0;
// Every valid row of the block sees at least the keys the first row sees.
const int first_row_limit =
    query_row(geo, warp.request_idx, warp.kv_head_idx, warp.row_first, warp.context_len, CAUSAL).key_limit;
const int32_t* table_row = block_table + static_cast<long long>(warp.request_idx) * geo.max_pages;
const bool vector_copy = is_aligned16(key_pages) && is_aligned16(value_pages);

auto tile_of = [&](int tile_idx) { return position_tile(tile_idx, KEY_TILE, geo.page_size, pos_end); };

// All threads copy one tile's K and V rows into ring stage `stage`.
auto issue = [&](int tile_idx, int stage) {
  copy_key_tile<T, HEAD_DIM, KEY_TILE, Rows>(geo, table_row, warp, tile_of(tile_idx), key_pages, value_pages,
                                            k_ring + stage * STAGE_ELEMS, v_ring + stage * STAGE_ELEMS, vector_copy,
                                            THREADS);
};

float out_acc[O_TILES][4] = {};
float run_max[2] = {NEG_INF, NEG_INF};
float run_sum[2] = {0.0f, 0.0f};

// S = Q K^T for the warpgroup's 64 rows and the KEY_TILE keys of ring stage
// `stage`, issued and committed, not waited for.
auto issue_scores = [&](float (&score)[S_TILES][4], int stage) {
  const T* stage_k = k_ring + stage * STAGE_ELEMS;
  wgmma_fence();
#pragma unroll
  for (int kc = 0; kc < QK_CHUNKS; ++kc) {
    const unsigned long long desc = wgmma_descriptor(stage_k + (kc / 4) * KEY_TILE * 64 + (kc % 4) * 16, 16, 1024);
    wgmma_rs<0>(score, q_frag[kc], desc, kc > 0, T{});
  }
  wgmma_commit();
};

// O += P V for the weights in `score` and the values of ring stage `stage`,
// issued and committed: the score accumulators of key blocks 2kc, 2kc+1 are
// the A fragment of key chunk kc.
auto issue_values = [&](const float (&score)[S_TILES][4], int stage) {
  unsigned p_frag[PV_CHUNKS][4];
#pragma unroll
  for (int kc = 0; kc < PV_CHUNKS; ++kc) {
    p_frag[kc][0] = pack_pair(score[2 * kc][0], score[2 * kc][1], T{});
    p_frag[kc][1] = pack_pair(score[2 * kc][2], score[2 * kc][3], T{});
    p_frag[kc][2] = pack_pair(score[2 * kc + 1][0], score[2 * kc + 1][1], T{});
    p_frag[kc][3] = pack_pair(score[2 * kc + 1][2], score[2 * kc + 1][3], T{});
  }
  const T* stage_v = v_ring + stage * STAGE_ELEMS;
  wgmma_fence();
#pragma unroll
  for (int kc = 0; kc < PV_CHUNKS; ++kc) {
    const unsigned long long desc = wgmma_descriptor(stage_v + kc * 16 * 64, KEY_TILE * 128, 1024);
    wgmma_rs<1>(out_acc, p_frag[kc], desc, 1, T{});
  }
  wgmma_commit();
};

// One online-softmax step; tiles that every row sees whole skip the cut.
auto softmax = [&](float (&score)[S_TILES][4], const PageTile& tile) {
  if (tile.count == KEY_TILE && tile.pos_begin + KEY_TILE - 1 <= first_row_limit) {
    warpgroup_softmax<false, POSITIVE_SCALE>(score, out_acc, run_max, run_sum, warp, tile, score_scale);
  } else {
    warpgroup_softmax<true, POSITIVE_SCALE>(score, out_acc, run_max, run_sum, warp, tile, score_scale);
  }
};

// ---- Walk the key tiles, STAGES - 1 copies in flight ahead of the one consumed ---------
#pragma unroll
for (int s = 0; s + 1 < STAGES; ++s) {
  if (s < num_tiles) {
    issue(s, s);
  }
  commit_async();
}
for (int tile_idx = 0; tile_idx < num_tiles; ++tile_idx) {
  const int stage = tile_idx % STAGES;
  wait_async<STAGES - 2>();
  fence_async_shared();
  __syncthreads();
  // Every thread is past the tile before this one, whose stage is refilled now.
  if (tile_idx + STAGES - 1 < num_tiles) {
    issue(tile_idx + STAGES - 1, (tile_idx + STAGES - 1) % STAGES);
  }
  commit_async();

  float score[S_TILES][4];
  issue_scores(score, stage);
  wgmma_wait<0>();
  hold_registers(score);
  softmax(score, tile_of(tile_idx));
  issue_values(score, stage);
  wgmma_wait<0>();
  hold_registers(out_acc);
}
wait_async<0>();

// ---- Normalise and store -------------------------------------------------------------
store_rows(out, out_acc, run_sum, warp.rows, warp.pair_idx);
