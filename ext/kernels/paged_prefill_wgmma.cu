// paged_prefill_wgmma: attention for long queries (L > 8) on Hopper's
// warpgroup tensor cores (wgmma, sm_90a).
//
// Body of a kernel the op compiles itself (NVRTC, compute_90a; nvrtc_compile.h)
// and runs through MLX's precompiled_cuda_kernel; headers: paged_common.cuh,
// paged_mma.cuh, paged_bulk_copy.cuh, paged_wgmma.cuh. The entry point
// (gpu_dispatch.cpp) takes the pointers query, key_pages, value_pages,
// block_table, context_lens and out as paged_decode does, then the ints
// batch, num_q_heads, num_queries, head_dim, num_pages, num_kv_heads,
// page_size, max_pages (the shapes the other kernels read). Constants: T (bfloat16 or float16), HEAD_DIM (64 or
// 128), KEY_TILE (64 or 128), STAGES (ring depth, at least 2), WARPGROUPS
// (1 to 3), PRODUCER_REGISTERS (0, or the registers of a producer warpgroup),
// CAUSAL, TABLE, SCALE_BITS, SCALE_NEGATIVE (paged_common.cuh).
//
// Ownership: block x owns (request_idx, kv_head_idx, row_tile_idx), the
// 64 * WARPGROUPS query rows [row_tile_idx * 64 * WARPGROUPS, +64 *
// WARPGROUPS) of that kv head's G * L rows (numbered position-major), and
// writes exactly those rows of `out`. Warpgroup g owns 64 of them, copied
// once into its query tile in shared memory (the A operand of S = Q K^T); its
// warp w rows 16w..16w+15 of those, with their running output (float32), max
// and sum in registers, in the layouts of paged_mma.cuh.
// The block walks the request's positions in key tiles of KEY_TILE
// positions (position_tile). The copying threads copy a tile's K and V rows
// with cp.async into a ring of STAGES stages in the swizzled layout of
// paged_wgmma.cuh (Sw128Rows): a tile inside one page by fixed per-thread
// offsets from the page's base (copy_tile_rows), a tile across pages row by
// row. The copying threads are every thread where PRODUCER_REGISTERS is 0;
// otherwise a producer warpgroup after the WARPGROUPS consumers, which keeps
// PRODUCER_REGISTERS registers a thread and gives the rest to the consumers
// (setmaxnreg), copies every tile as soon as its stage is free and takes no
// other part. Each stage has two mbarriers: full (every copying thread's
// copies landed, arrived on by cp.async completion) and free (every consumer
// thread is done reading it), so no block-wide barrier ties the warpgroups
// together.
// The warpgroups take turns on the tensor cores (named barriers, turn_wait /
// turn_pass): in its turn a warpgroup issues S = Q K^T for this tile and
// O += P V for the previous one, then runs this tile's softmax
// (warpgroup_softmax, without the causal and length cut where every row sees
// the whole tile) as soon as the scores land, while its own O += P V and the
// next warpgroup's products run. Under the causal mask the walk stops after
// the last key the block's last row can see.
// Launch: 128 * (WARPGROUPS + (PRODUCER_REGISTERS > 0)) threads per block, blocks = B * H_kv * ceil(G * L
// / (64 * WARPGROUPS)), dynamic shared memory (2 * STAGES * KEY_TILE +
// WARPGROUPS * 64) * HEAD_DIM * sizeof(T) + 16 * STAGES + 1024 (the ring, the
// query tiles, the barriers, and slack to align the ring to 1024 bytes).
using namespace pagecheck;
constexpr bool PRODUCER = PRODUCER_REGISTERS > 0;
constexpr int CONSUMER_THREADS = WARPGROUP_THREADS * WARPGROUPS;
constexpr int THREADS = CONSUMER_THREADS + (PRODUCER ? WARPGROUP_THREADS : 0);
// The threads that copy the ring's tiles.
constexpr int COPY_THREADS = PRODUCER ? WARPGROUP_THREADS : THREADS;
// Each consumer's share of the 64K registers of a multiprocessor the producer leaves, rounded down to setmaxnreg's
// multiple of 8.
constexpr int CONSUMER_REGISTERS =
    PRODUCER ? ((65536 / WARPGROUP_THREADS - PRODUCER_REGISTERS) / WARPGROUPS / 8 * 8 > 256
                    ? 256
                    : (65536 / WARPGROUP_THREADS - PRODUCER_REGISTERS) / WARPGROUPS / 8 * 8)
             : 0;
constexpr int ROW_TILE = 64 * WARPGROUPS;
constexpr int ELEM_BYTES = static_cast<int>(sizeof(T));
using Rows = Sw128Rows<KEY_TILE>;
constexpr int S_TILES = KEY_TILE / 8;
constexpr int QK_CHUNKS = HEAD_DIM / 16;
constexpr int O_TILES = HEAD_DIM / 8;
constexpr int PV_CHUNKS = KEY_TILE / 16;
constexpr int STAGE_ELEMS = KEY_TILE * HEAD_DIM;
constexpr int STAGE_BYTES = STAGE_ELEMS * ELEM_BYTES;
constexpr int Q_TILE_ELEMS = 64 * HEAD_DIM;
// The ring, the warpgroups' query tiles, the ring's barriers (stage_full and stage_free, one per stage), 1024
// bytes of alignment slack.
constexpr int SHARED_BYTES =
    2 * STAGES * STAGE_BYTES + WARPGROUPS * Q_TILE_ELEMS * ELEM_BYTES + 2 * STAGES * 8 + 1024;
static_assert(HEAD_DIM == 64 || HEAD_DIM == 128, "HEAD_DIM");
static_assert(KEY_TILE == 64 || KEY_TILE == 128, "KEY_TILE");
static_assert(STAGES >= 2, "STAGES");
static_assert(WARPGROUPS >= 1 && WARPGROUPS <= 3, "WARPGROUPS");
static_assert(!PRODUCER || (PRODUCER_REGISTERS % 8 == 0 && PRODUCER_REGISTERS >= 24), "PRODUCER_REGISTERS");
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
T* q_tiles = v_ring + STAGES * STAGE_ELEMS;
// stage_full[s]: stage s holds its tile (every copying thread's copies landed); stage_free[s]: every consumer
// thread is done reading it.
unsigned long long* stage_full = reinterpret_cast<unsigned long long*>(q_tiles + WARPGROUPS * Q_TILE_ELEMS);
unsigned long long* stage_free = stage_full + STAGES;
init_stage_barriers(stage_full, STAGES, threadIdx.x, COPY_THREADS);
init_stage_barriers(stage_free, STAGES, threadIdx.x, CONSUMER_THREADS);
const int group = threadIdx.x / WARPGROUP_THREADS;
const bool is_producer = PRODUCER && group == WARPGROUPS;
// This thread's number among the copying threads.
const int copy_thread = PRODUCER ? static_cast<int>(threadIdx.x) - CONSUMER_THREADS : static_cast<int>(threadIdx.x);

// ---- Positions -----------------------------------------------------------------
// The shapes the other kernels read from MLX's signature, from the int parameters.
const int query_dims[4] = {batch, num_q_heads, num_queries, head_dim};
const int pool_dims[4] = {num_pages, num_kv_heads, page_size, head_dim};
const int table_dims[2] = {batch, max_pages};
const PagedGeometry geo = make_geometry(query_dims, pool_dims, table_dims, TABLE);
const WarpRows warp = warp_rows(geo, context_lens, ROW_TILE, CAUSAL);
T* q_tile = q_tiles + group * Q_TILE_ELEMS;
if (!is_producer) {
  store_query_tile<T, HEAD_DIM>(q_tile, query, warp.rows, warp.pair_idx, (threadIdx.x / 32) % 4);
}
fence_async_shared();
__syncthreads();
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

// The copying threads copy tile `tile_idx`'s K and V rows into its ring
// stage and arrive on the stage's full barrier once their copies have landed.
auto issue = [&](int tile_idx) {
  const int stage = tile_idx % STAGES;
  const PageTile tile = tile_of(tile_idx);
  T* stage_k = k_ring + stage * STAGE_ELEMS;
  T* stage_v = v_ring + stage * STAGE_ELEMS;
  copy_key_tile<T, HEAD_DIM, KEY_TILE, Rows, COPY_THREADS>(geo, table_row, warp, tile, key_pages, value_pages,
                                                          stage_k, stage_v, vector_copy, copy_thread);
  if (vector_copy) {
    barrier_arrive_after_copies(stage_full + stage);
  } else {
    barrier_arrive(stage_full + stage);
  }
};

// Descriptors of the query tile and of ring stage 0's K and V; the others are offsets from them.
const unsigned long long q_desc = wgmma_descriptor(q_tile, 16, 1024);
const unsigned long long k_desc = wgmma_descriptor(k_ring, 16, 1024);
const unsigned long long v_desc = wgmma_descriptor(v_ring, KEY_TILE * 128, 1024);

float out_acc[O_TILES][4] = {};
float run_max[2] = {NEG_INF, NEG_INF};
float run_sum[2] = {0.0f, 0.0f};

// S = Q K^T for the warpgroup's 64 rows and the KEY_TILE keys of ring stage
// `stage`, issued, not committed.
auto issue_scores = [&](float (&score)[S_TILES][4], int stage) {
  const unsigned long long stage_k = wgmma_descriptor_at(k_desc, stage * STAGE_BYTES);
  wgmma_fence();
#pragma unroll
  for (int kc = 0; kc < QK_CHUNKS; ++kc) {
    const unsigned long long desc_q =
        wgmma_descriptor_at(q_desc, ((kc / 4) * 64 * 64 + (kc % 4) * 16) * ELEM_BYTES);
    const unsigned long long desc_k =
        wgmma_descriptor_at(stage_k, ((kc / 4) * KEY_TILE * 64 + (kc % 4) * 16) * ELEM_BYTES);
    wgmma_ss<0>(score, desc_q, desc_k, kc > 0, T{});
  }
};

// The weights in `score` as the A fragments of O = P V: the score
// accumulators of key blocks 2kc, 2kc+1 are the fragment of key chunk kc.
unsigned p_frag[PV_CHUNKS][4];
auto pack_weights = [&](const float (&score)[S_TILES][4]) {
#pragma unroll
  for (int kc = 0; kc < PV_CHUNKS; ++kc) {
    p_frag[kc][0] = pack_pair(score[2 * kc][0], score[2 * kc][1], T{});
    p_frag[kc][1] = pack_pair(score[2 * kc][2], score[2 * kc][3], T{});
    p_frag[kc][2] = pack_pair(score[2 * kc + 1][0], score[2 * kc + 1][1], T{});
    p_frag[kc][3] = pack_pair(score[2 * kc + 1][2], score[2 * kc + 1][3], T{});
  }
};

// O += P V for the packed weights and the values of ring stage `stage`,
// issued, not committed.
auto issue_values = [&](int stage) {
  const unsigned long long stage_v = wgmma_descriptor_at(v_desc, stage * STAGE_BYTES);
  wgmma_fence();
#pragma unroll
  for (int kc = 0; kc < PV_CHUNKS; ++kc) {
    wgmma_rs<1>(out_acc, p_frag[kc], wgmma_descriptor_at(stage_v, kc * 16 * 64 * ELEM_BYTES), 1, T{});
  }
};

// One online-softmax step, leaving the output accumulators' factors in
// `rescale`; tiles that every row sees whole skip the cut.
auto softmax = [&](float (&score)[S_TILES][4], float (&rescale)[2], const PageTile& tile) {
  if (tile.count == KEY_TILE && tile.pos_begin + KEY_TILE - 1 <= first_row_limit) {
    warpgroup_softmax<false, POSITIVE_SCALE>(score, rescale, run_max, run_sum, warp, tile, score_scale);
  } else {
    warpgroup_softmax<true, POSITIVE_SCALE>(score, rescale, run_max, run_sum, warp, tile, score_scale);
  }
};

// ---- Walk the key tiles -----------------------------------------------------------------
// Step t (0..num_tiles) of a warpgroup: in its turn on the tensor cores it
// issues S = Q K^T for tile t, then O += P V for tile t - 1 (each its own
// commit group), and hands the turn to the next warpgroup. Once the scores
// have landed it runs tile t's softmax while its own O += P V and the next
// warpgroup's products still run; then it waits for O += P V, rescales O by
// the softmax's factors and packs tile t's weights. Stage t % STAGES is read
// once its full barrier completes; tile t - 1's stage is freed after its
// values are used, and refilled with tile t + STAGES - 1 at the end of the
// step, once every thread has freed it (so the ring needs STAGES >= 3 for the
// copies to stay a step ahead of the slowest warpgroup). The first step (no
// values yet) and the last (no scores) are separate calls of the step, so
// that no product is issued on a branch: ptxas serializes every wgmma of a
// kernel whose commit groups differ between paths.
// With a producer, it fills each stage as soon as the consumers free it (its
// copies arrive on the full barriers as they land), waits for its last copies
// and leaves; the consumers' steps then copy nothing.
if (PRODUCER) {
  if (is_producer) {
    release_registers<PRODUCER ? PRODUCER_REGISTERS : 24>();
    for (int tile_idx = 0; tile_idx < num_tiles; ++tile_idx) {
      if (tile_idx >= STAGES) {
        barrier_wait(stage_free + tile_idx % STAGES, (tile_idx / STAGES - 1) % 2);
      }
      issue(tile_idx);
    }
    wait_all_async();
    return;
  }
  claim_registers<PRODUCER ? CONSUMER_REGISTERS : 24>();
}
constexpr bool TURNS = WARPGROUPS > 1;
const int my_turn = 1 + group;
const int next_turn = 1 + (group + 1) % WARPGROUPS;
if (!PRODUCER) {
#pragma unroll
  for (int tile_idx = 0; tile_idx + 1 < STAGES; ++tile_idx) {
    if (tile_idx < num_tiles) {
      issue(tile_idx);
    }
  }
}
if (TURNS && num_tiles > 0 && group == WARPGROUPS - 1) {
  // The last warpgroup hands warpgroup 0 its first turn.
  turn_pass(next_turn);
}
// scores: tile `step` exists (every step but the last); values: tile step - 1 does (every step but the first).
// Each call passes constants, so every instance is straight-line code.
auto walk_step = [&](int step, bool scores, bool values) {
  const int stage = step % STAGES;
  const int prior_stage = (step + STAGES - 1) % STAGES;
  if (scores) {
    barrier_wait(stage_full + stage, (step / STAGES) % 2);
    fence_async_shared();
  }
  float score[S_TILES][4];
  if (TURNS) {
    turn_wait(my_turn);
  }
  if (scores) {
    issue_scores(score, stage);
    wgmma_commit();
  }
  if (values) {
    issue_values(prior_stage);
    wgmma_commit();
  }
  // Every turn is handed on but the last warpgroup's last, which warpgroup 0 never waits for.
  if (TURNS && (scores || group != WARPGROUPS - 1)) {
    turn_pass(next_turn);
  }
  float rescale[2];
  if (scores) {
    // The scores were committed first: O += P V may still run.
    if (values) {
      wgmma_wait<1>();
    } else {
      wgmma_wait<0>();
    }
    hold_registers(score);
    softmax(score, rescale, tile_of(step));
  }
  wgmma_wait<0>();
  hold_registers(out_acc);
  if (values) {
    barrier_arrive(stage_free + prior_stage);
  }
  if (scores) {
    rescale_rows(out_acc, 0, rescale[0]);
    rescale_rows(out_acc, 1, rescale[1]);
    pack_weights(score);
  }
  const int refill = step + STAGES - 1;
  if (!PRODUCER && refill < num_tiles) {
    if (refill >= STAGES) {
      barrier_wait(stage_free + prior_stage, (refill / STAGES - 1) % 2);
    }
    issue(refill);
  }
};
// A block with no key to see (context 0) takes no turn: nobody would hand it one.
if (num_tiles > 0) {
  walk_step(0, true, false);
  for (int step = 1; step < num_tiles; ++step) {
    walk_step(step, true, true);
  }
  walk_step(num_tiles, false, true);
}

// ---- Normalise and store -------------------------------------------------------------
store_rows(out, out_acc, run_sum, warp.rows, warp.pair_idx);
