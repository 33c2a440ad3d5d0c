// The tensor-core page walk of paged_decode and paged_decode_split
// (bfloat16 / float16, head dims that are multiples of 16 up to 128).
//
// Same block as the CUDA-core walk (paged_decode_walk.cuh): DECODE_WARPS warps
// over a tile range of one (request, kv head), sharing each K/V load among
// the block's query rows, each warp streaming its own tiles through its own
// ring (cp.async, or bulk copies when BULK: paged_bulk_copy.cuh). What
// changes is who computes: a warp holds the block's 16
// query rows as one mma.sync A operand (rows past the valid ones are zero)
// and each tile of 16 positions costs 2 x HEAD_DIM/16 mma for the scores and
// HEAD_DIM/8 for the output, with no conversion of K/V to float32 and no
// shuffle reductions. The per-token instruction count drops well below what
// the memory system needs per token, which the lane-per-dims walk does not.
//
// Ownership inside a warp (fragment layouts in paged_mma.cuh): lane
// (group, pair) holds rows group and group + 8 of the 16: their query
// fragments, their running output for dims nt*8 + 2 pair, +1 of every n-tile
// nt, a per-lane partial of each row's sum; the running max is the same in
// the 4 lanes of a group. All lanes of a warp copy its tiles (rows swizzled,
// or padded, so that copies and ldmatrix are free of bank conflicts:
// SharedRows in paged_mma.cuh) and read each other's copies, so a
// __syncwarp follows each wait and precedes each reuse of a stage. A landed
// tile's K and V fragments go to registers first and its stage is refilled
// before the tile's math, so STAGES tiles stay in flight while a warp
// computes. Even so, one block per multiprocessor (one warp per scheduler) is
// bound by instruction latency and walks about 1.2 times slower per position
// than two (H200, NOTES.md); the split rule counts that.
#ifndef PAGECHECK_PAGED_DECODE_MMA_WALK_CUH
#define PAGECHECK_PAGED_DECODE_MMA_WALK_CUH

namespace pagecheck {

constexpr int DECODE_MMA_ROWS = 16;

// A bulk-filled ring keeps padded rows (bulk copies write whole rows), so
// SWIZZLE applies to cp.async rings only.
template <typename T, int HEAD_DIM, int STAGES, bool BULK, bool SWIZZLE>
struct DecodeMmaLayout {
  static_assert(HEAD_DIM % 16 == 0 && HEAD_DIM <= 128, "HEAD_DIM");
  static_assert(STAGES >= 2, "the ring needs a stage landing while another is read");
  static constexpr int TILE_TOKENS = 16;
  using Rows = SharedRows<HEAD_DIM, SWIZZLE && !BULK>;
  static constexpr int ROW_STRIDE = Rows::STRIDE;
  static constexpr int QK_CHUNKS = HEAD_DIM / 16;
  static constexpr int QK_PAIRS = QK_CHUNKS / 2 > 0 ? QK_CHUNKS / 2 : 1; // array size (0 pairs at D 16)
  static constexpr int O_TILES = HEAD_DIM / 8;
  static constexpr int ACC_ELEMS = HEAD_DIM;
  static constexpr int STAGE_ELEMS = 2 * TILE_TOKENS * ROW_STRIDE;
  using Shared = DecodeShared<T, STAGE_ELEMS, STAGES, DECODE_MMA_ROWS, ACC_ELEMS>;
  using Merge = typename Shared::Merge;
  static constexpr int SHARED_BYTES = Shared::SHARED_BYTES;
};

template <typename T, int HEAD_DIM, bool CAUSAL, int STAGES, bool BULK, bool SWIZZLE>
__device__ void decode_walk_mma(
    const T* query,
    const T* key_pages,
    const T* value_pages,
    const int32_t* block_table,
    const DecodeBlock& block,
    float scale,
    int tile_begin,
    int tile_end,
    unsigned char* shared) {
  const PagedGeometry& geo = block.geo;
  const int request_idx = block.request_idx;
  const int kv_head_idx = block.kv_head_idx;
  using L = DecodeMmaLayout<T, HEAD_DIM, STAGES, BULK, SWIZZLE>;
  constexpr int TILE = L::TILE_TOKENS;

  // ---- Positions -------------------------------------------------------------
  const int lane_idx = threadIdx.x % WARP_LANES;
  const int warp_idx = threadIdx.x / WARP_LANES;
  const int group_idx = lane_idx / 4;
  const int pair_idx = lane_idx % 4;
  const QueryRow rows[2] = {
      block.row(group_idx, CAUSAL), block.row(group_idx + 8, CAUSAL)};

  // ---- Query fragments (raw; the scale is applied to the float32 scores) -----
  unsigned q_frag[L::QK_CHUNKS][4];
#pragma unroll
  for (int kc = 0; kc < L::QK_CHUNKS; ++kc) {
#pragma unroll
    for (int part = 0; part < 4; ++part) {
      const QueryRow& row = rows[part % 2];
      const int dim = kc * 16 + (part / 2) * 8 + 2 * pair_idx;
      q_frag[kc][part] = row.valid
          ? *reinterpret_cast<const unsigned*>(query + row.offset + dim)
          : 0u;
    }
  }
  const float score_scale = scale * LOG2_E;
  const bool upper_rows = __any_sync(ALL_LANES, rows[1].valid);

  float out_acc[L::O_TILES][4];
#pragma unroll
  for (int nt = 0; nt < L::O_TILES; ++nt) {
#pragma unroll
    for (int part = 0; part < 4; ++part) {
      out_acc[nt][part] = 0.0f;
    }
  }
  float run_max[2] = {NEG_INF, NEG_INF};
  float run_sum[2] = {0.0f, 0.0f};

  // ---- This warp's tiles ---------------------------------------------------------
  const TileDivisor tiles_per_page(ceil_div(geo.page_size, TILE));
  const int my_tiles = warp_tile_count(tile_begin, tile_end, warp_idx);
  T* ring = reinterpret_cast<T*>(shared) +
      warp_idx * STAGES * L::STAGE_ELEMS;
  const bool vector_copy = is_aligned16(key_pages) && is_aligned16(value_pages);
  const int32_t* table_row =
      block_table + static_cast<long long>(request_idx) * geo.max_pages;
  // Bulk copies complete on one barrier per ring stage (paged_bulk_copy.cuh).
  __shared__ unsigned long long barriers[BULK ? DECODE_WARPS * STAGES : 1];
  auto stage_barrier = [&](int local) { return &barriers[warp_idx * STAGES + local % STAGES]; };
  if constexpr (BULK) {
    init_stage_barriers(stage_barrier(0), STAGES, lane_idx);
    __syncwarp();
  }

  auto tile_of = [&](int local) {
    return page_tile(
        tile_begin + warp_idx + local * DECODE_WARPS,
        TILE,
        tiles_per_page,
        geo.page_size,
        block.context_len);
  };

  // All lanes copy the local-th tile's K and V rows into its ring stage.
  auto issue = [&](int local) {
    const PageTile tile = tile_of(local);
    const int page_id = tile_page_id(geo, table_row, request_idx, tile);
    const long long base = page_offset(geo, page_id, kv_head_idx) +
        static_cast<long long>(tile.slot_begin) * HEAD_DIM;
    T* stage_k = ring + (local % STAGES) * L::STAGE_ELEMS;
    T* stage_v = stage_k + TILE * L::ROW_STRIDE;
    fill_stage<BULK, T, HEAD_DIM, TILE, typename L::Rows, WARP_LANES>(
        stage_k, stage_v, key_pages, value_pages, base, tile.count, page_id >= 0, vector_copy,
        stage_barrier(local), lane_idx);
  };

  // A stage's tile has landed, for every lane (tile `local` is cp.async
  // group `local`, and STAGES + local groups are committed by now).
  auto wait_landed = [&](int local) {
    wait_stage<BULK, STAGES>(stage_barrier(local), local);
    __syncwarp();
  };

  // The tile's K and V fragments, read out of its stage so that the stage
  // can be refilled before the math: the ring then keeps STAGES tiles in
  // flight instead of STAGES - 1 while the warp computes (the walk is bound
  // by bytes in flight; pagecheck/gpu/stream_probe.py measures that bound).
  struct TileFragments {
    unsigned key[2][L::QK_PAIRS][4]; // n-tile, pair of k-chunks: ldmatrix x4
    unsigned key_tail[2][2]; // the odd last k-chunk (QK_CHUNKS odd): ldmatrix x2
    unsigned value[L::O_TILES / 2][4]; // pair of output n-tiles: ldmatrix x4 trans
  };

  // ldmatrix addresses: lane l gives row l % 8 of matrix l / 8. Key rows are
  // the tile's tokens (k-chunk pair p reads chunks 4 p + l / 8), value rows
  // tokens l % 8 + 8 ((l / 8) % 2) (output n-tile pair i reads chunk 2 i +
  // l / 16). Chunks past the first 8 and key rows 8..15 are compile-time
  // steps from these per-lane offsets (SharedRows), so a tile costs no
  // address arithmetic beyond the stage base.
  const int key_at[2] = {L::Rows::at(lane_idx % 8, lane_idx / 8), L::Rows::at(lane_idx % 8, 4 + lane_idx / 8)};
  const int value_row = lane_idx % 8 + ((lane_idx / 8) % 2) * 8;
  const int value_at[4] = {
      L::Rows::at(value_row, lane_idx / 16), L::Rows::at(value_row, 2 + lane_idx / 16),
      L::Rows::at(value_row, 4 + lane_idx / 16), L::Rows::at(value_row, 6 + lane_idx / 16)};
  constexpr int GROUP = L::Rows::CHUNK_GROUP_STEP;

  auto load_fragments = [&](int local, TileFragments& f) {
    const T* stage_k = ring + (local % STAGES) * L::STAGE_ELEMS;
    const T* stage_v = stage_k + TILE * L::ROW_STRIDE;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const T* key_rows = stage_k + nt * 8 * L::ROW_STRIDE;
#pragma unroll
      for (int kc = 0; kc + 1 < L::QK_CHUNKS; kc += 2) {
        const int pair = kc / 2;
        load_matrix_x4(f.key[nt][pair], key_rows + key_at[pair % 2] + (pair / 2) * GROUP);
      }
      if constexpr (L::QK_CHUNKS % 2 == 1) {
        load_matrix_x2(f.key_tail[nt],
                       key_rows + L::Rows::at(lane_idx % 8, 2 * (L::QK_CHUNKS - 1) + (lane_idx / 8) % 2));
      }
    }
#pragma unroll
    for (int nt = 0; nt < L::O_TILES; nt += 2) {
      const int pair = nt / 2;
      load_matrix_x4_trans(f.value[pair], stage_v + value_at[pair % 4] + (pair / 4) * GROUP);
    }
  };

  auto compute = [&](int local, const TileFragments& f) {
    const PageTile tile = tile_of(local);

    // Scores: 16 rows x 16 keys as two n-tiles of 8 keys. Each n-tile sums
    // its even and odd k-chunks in two accumulators, added at the end: four
    // independent mma chains of QK_CHUNKS / 2 instead of two of QK_CHUNKS, so
    // the walk waits on half as many dependent mma latencies a tile.
    float score[2][4];
    float score_odd[2][4];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int part = 0; part < 4; ++part) {
        score[nt][part] = 0.0f;
        score_odd[nt][part] = 0.0f;
      }
#pragma unroll
      for (int kc = 0; kc + 1 < L::QK_CHUNKS; kc += 2) {
        mma_16816(score[nt], q_frag[kc], f.key[nt][kc / 2][0], f.key[nt][kc / 2][1], T{});
        mma_16816(score_odd[nt], q_frag[kc + 1], f.key[nt][kc / 2][2], f.key[nt][kc / 2][3], T{});
      }
      if constexpr (L::QK_CHUNKS % 2 == 1) {
        mma_16816(score[nt], q_frag[L::QK_CHUNKS - 1], f.key_tail[nt][0], f.key_tail[nt][1], T{});
      }
#pragma unroll
      for (int part = 0; part < 4; ++part) {
        score[nt][part] += score_odd[nt][part];
      }
    }

    fragment_softmax(score, out_acc, run_max, run_sum, rows, tile, pair_idx, score_scale, upper_rows);

    // Output += P V over the tile's 16 keys (one k-chunk).
    const unsigned p_frag[4] = {
        pack_pair(score[0][0], score[0][1], T{}),
        pack_pair(score[0][2], score[0][3], T{}),
        pack_pair(score[1][0], score[1][1], T{}),
        pack_pair(score[1][2], score[1][3], T{})};
#pragma unroll
    for (int nt = 0; nt < L::O_TILES; nt += 2) {
      mma_16816(out_acc[nt], p_frag, f.value[nt / 2][0], f.value[nt / 2][1], T{});
      mma_16816(out_acc[nt + 1], p_frag, f.value[nt / 2][2], f.value[nt / 2][3], T{});
    }
  };

  // ---- Pipeline: STAGES tiles in flight; a stage is refilled as soon as its
  // tile's fragments are in registers, before the tile's math --------------
#pragma unroll
  for (int local = 0; local < STAGES; ++local) {
    if (local < my_tiles) {
      issue(local);
    }
    commit_async();
  }
  for (int local = 0; local < my_tiles; ++local) {
    wait_landed(local);
    TileFragments fragments;
    load_fragments(local, fragments);
    __syncwarp(); // every lane has read the stage before any lane refills it
    if (local + STAGES < my_tiles) {
      issue(local + STAGES);
    }
    commit_async();
    compute(local, fragments);
  }
  wait_async<0>();

  // ---- Publish each warp's state; the ring's bytes are reused ----------------------
  // Rows 8..15 only where some of them exist (upper_rows): the epilogues read
  // the block's live rows alone (DecodeBlock::live_rows).
  __syncthreads();
  typename L::Merge merge(shared);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    if (half == 1 && !upper_rows) {
      break;
    }
    const int row = group_idx + 8 * half;
    const float total = group_sum<4>(run_sum[half]);
#pragma unroll
    for (int nt = 0; nt < L::O_TILES; ++nt) {
      merge.acc(warp_idx, row, nt * 8 + 2 * pair_idx) = out_acc[nt][2 * half];
      merge.acc(warp_idx, row, nt * 8 + 2 * pair_idx + 1) = out_acc[nt][2 * half + 1];
    }
    if (pair_idx == 0) {
      merge.publish_stats(warp_idx, row, run_max[half], total);
    }
  }
  __syncthreads();
}

} // namespace pagecheck

#endif // PAGECHECK_PAGED_DECODE_MMA_WALK_CUH
