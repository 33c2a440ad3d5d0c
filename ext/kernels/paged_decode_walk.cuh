// The CUDA-core page walk of paged_decode and paged_decode_split (any dtype,
// any head dim).
//
// One thread block of DECODE_WARPS warps walks a range of tiles of one
// (request, kv head) for up to ROWS query rows of that kv head (the GQA group
// times the query positions), so every K/V element it loads serves all of
// those rows. Tiles hold TILE_TOKENS positions and never cross a page; warp w
// takes tiles tile_begin + w, + DECODE_WARPS, ... and streams each into its
// own ring of DECODE_STAGES shared-memory stages with cp.async.
//
// Inside a warp, a group of LANES_PER_TOKEN lanes owns one token of a step:
// lane token_lane holds the contiguous dims
// [token_lane * DIMS_PER_LANE, (token_lane + 1) * DIMS_PER_LANE) of every query
// row, of the running output and of each K/V row it reads (16-byte vectors).
// A lane copies exactly the bytes it later reads, so the ring needs no barrier:
// cp.async.wait_group alone makes a lane's own copies visible to it. Dot
// products are reduced across the group with xor shuffles; each group keeps
// its own running (max, sum, output) per row in float32 registers.
//
// At the end the groups of a warp merge by shuffles and each warp publishes
// its state to DecodeMerge (paged_decode_merge.cuh) for the epilogue.
#ifndef PAGECHECK_PAGED_DECODE_WALK_CUH
#define PAGECHECK_PAGED_DECODE_WALK_CUH

namespace pagecheck {

constexpr int DECODE_STAGES = 3;
constexpr int DECODE_STEPS_PER_TILE = 4;

template <typename T, int HEAD_DIM, int ROWS>
struct DecodeLayout {
  static constexpr int VEC = 16 / static_cast<int>(sizeof(T));
  static constexpr int NUM_VECS = ceil_div(HEAD_DIM, VEC);
  static constexpr int VECS_PER_LANE = ceil_div(NUM_VECS, WARP_LANES);
  static constexpr int LANES_PER_TOKEN =
      next_pow2(ceil_div(NUM_VECS, VECS_PER_LANE));
  static constexpr int TOKENS_PER_STEP = WARP_LANES / LANES_PER_TOKEN;
  static constexpr int TILE_TOKENS = TOKENS_PER_STEP * DECODE_STEPS_PER_TILE;
  static constexpr int DIMS_PER_LANE = VECS_PER_LANE * VEC;
  // A K or V row in shared memory, padded to whole 16-byte vectors.
  static constexpr int ROW_ELEMS = NUM_VECS * VEC;
  // Dims covered by one token group (>= HEAD_DIM).
  static constexpr int ACC_ELEMS = LANES_PER_TOKEN * DIMS_PER_LANE;
  static constexpr int STAGE_ELEMS = 2 * TILE_TOKENS * ROW_ELEMS;
  using Shared = DecodeShared<T, STAGE_ELEMS, DECODE_STAGES, ROWS, ACC_ELEMS>;
  using Merge = typename Shared::Merge;
  static constexpr int SHARED_BYTES = Shared::SHARED_BYTES;
};

template <typename T, int HEAD_DIM, int ROWS, bool CAUSAL>
__device__ void decode_walk(
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
  using L = DecodeLayout<T, HEAD_DIM, ROWS>;
  constexpr int DPL = L::DIMS_PER_LANE;
  constexpr int VPL = L::VECS_PER_LANE;
  constexpr int VEC = L::VEC;
  constexpr int STEPS = DECODE_STEPS_PER_TILE;

  // ---- Positions -------------------------------------------------------------
  const int lane_idx = threadIdx.x % WARP_LANES;
  const int warp_idx = threadIdx.x / WARP_LANES;
  const int token_lane = lane_idx % L::LANES_PER_TOKEN;
  const int token_group = lane_idx / L::LANES_PER_TOKEN;

  // ---- Query rows into registers, pre-scaled for base-2 softmax ----------------
  const float q_scale = scale * LOG2_E;
  float q[ROWS][DPL];
  int key_limit[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const QueryRow row = block.row(r, CAUSAL);
    key_limit[r] = row.key_limit;
#pragma unroll
    for (int e = 0; e < DPL; ++e) {
      const int dim = (token_lane * VPL + e / VEC) * VEC + e % VEC;
      q[r][e] = (row.valid && dim < HEAD_DIM)
          ? to_float(query[row.offset + dim]) * q_scale
          : 0.0f;
    }
  }

  float run_max[ROWS];
  float run_sum[ROWS];
  float acc[ROWS][DPL];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    run_max[r] = NEG_INF;
    run_sum[r] = 0.0f;
#pragma unroll
    for (int e = 0; e < DPL; ++e) {
      acc[r][e] = 0.0f;
    }
  }

  // ---- This warp's tiles ---------------------------------------------------------
  const TileDivisor tiles_per_page(ceil_div(geo.page_size, L::TILE_TOKENS));
  const int my_tiles = warp_tile_count(tile_begin, tile_end, warp_idx);
  T* ring = reinterpret_cast<T*>(shared) +
      warp_idx * DECODE_STAGES * L::STAGE_ELEMS;
  const bool vector_copy = HEAD_DIM % VEC == 0 && is_aligned16(key_pages) &&
      is_aligned16(value_pages);
  const int32_t* table_row =
      block_table + static_cast<long long>(request_idx) * geo.max_pages;

  auto tile_of = [&](int local) {
    return page_tile(
        tile_begin + warp_idx + local * DECODE_WARPS,
        L::TILE_TOKENS,
        tiles_per_page,
        geo.page_size,
        block.context_len);
  };

  // Copy the local-th tile of this warp into its ring stage; slots past the
  // tile's count are zero-filled instead of read.
  auto issue = [&](int local) {
    const PageTile tile = tile_of(local);
    const int page_id = tile_page_id(geo, table_row, request_idx, tile);
    const long long base = page_offset(geo, page_id, kv_head_idx) +
        static_cast<long long>(tile.slot_begin) * HEAD_DIM;
    T* stage_k = ring + (local % DECODE_STAGES) * L::STAGE_ELEMS;
    T* stage_v = stage_k + L::TILE_TOKENS * L::ROW_ELEMS;
#pragma unroll
    for (int step = 0; step < STEPS; ++step) {
      const int token = step * L::TOKENS_PER_STEP + token_group;
      const bool live = page_id >= 0 && token < tile.count;
      const long long src =
          live ? base + static_cast<long long>(token) * HEAD_DIM : 0;
#pragma unroll
      for (int v = 0; v < VPL; ++v) {
        const int vec_idx = token_lane * VPL + v;
        if (vec_idx < L::NUM_VECS) {
          const int elem = vec_idx * VEC;
          T* dst_k = stage_k + token * L::ROW_ELEMS + elem;
          T* dst_v = stage_v + token * L::ROW_ELEMS + elem;
          if (vector_copy) {
            copy_async16(dst_k, key_pages + src + elem, live);
            copy_async16(dst_v, value_pages + src + elem, live);
          } else {
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
              const bool in = live && elem + e < HEAD_DIM;
              dst_k[e] = in ? key_pages[src + elem + e] : from_float<T>(0.0f);
              dst_v[e] = in ? value_pages[src + elem + e] : from_float<T>(0.0f);
            }
          }
        }
      }
    }
  };

  auto load_row = [&](const T* stage_row, float (&out)[DPL]) {
#pragma unroll
    for (int v = 0; v < VPL; ++v) {
      const int vec_idx = token_lane * VPL + v;
      if (vec_idx < L::NUM_VECS) {
        widen16(stage_row + vec_idx * VEC, out + v * VEC);
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          out[v * VEC + e] = 0.0f;
        }
      }
    }
  };

  // Scores of the tile first, one max and one rescale per row per tile, then
  // the value accumulation.
  auto consume = [&](int local) {
    const PageTile tile = tile_of(local);
    const T* stage_k = ring + (local % DECODE_STAGES) * L::STAGE_ELEMS;
    const T* stage_v = stage_k + L::TILE_TOKENS * L::ROW_ELEMS;
    float weight[STEPS][ROWS];
#pragma unroll
    for (int step = 0; step < STEPS; ++step) {
      const int token = step * L::TOKENS_PER_STEP + token_group;
      const int pos = tile.pos_begin + token;
      float k_row[DPL];
      load_row(stage_k + token * L::ROW_ELEMS, k_row);
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < DPL; ++e) {
          dot = fmaf(q[r][e], k_row[e], dot);
        }
        dot = group_sum<L::LANES_PER_TOKEN>(dot);
        const bool visible = token < tile.count && pos <= key_limit[r];
        weight[step][r] = visible ? dot : NEG_INF;
      }
    }
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      float tile_max = weight[0][r];
#pragma unroll
      for (int step = 1; step < STEPS; ++step) {
        tile_max = fmaxf(tile_max, weight[step][r]);
      }
      const float new_max = fmaxf(run_max[r], tile_max);
      const float base = usable_max(new_max);
      const float rescale = exp2f(run_max[r] - base);
      run_max[r] = new_max;
      run_sum[r] *= rescale;
#pragma unroll
      for (int e = 0; e < DPL; ++e) {
        acc[r][e] *= rescale;
      }
#pragma unroll
      for (int step = 0; step < STEPS; ++step) {
        weight[step][r] = exp2f(weight[step][r] - base);
        run_sum[r] += weight[step][r];
      }
    }
#pragma unroll
    for (int step = 0; step < STEPS; ++step) {
      const int token = step * L::TOKENS_PER_STEP + token_group;
      float v_row[DPL];
      load_row(stage_v + token * L::ROW_ELEMS, v_row);
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
#pragma unroll
        for (int e = 0; e < DPL; ++e) {
          acc[r][e] = fmaf(weight[step][r], v_row[e], acc[r][e]);
        }
      }
    }
  };

  // ---- Pipeline: DECODE_STAGES - 1 tiles in flight ahead of the one consumed ----
#pragma unroll
  for (int local = 0; local < DECODE_STAGES - 1; ++local) {
    if (local < my_tiles) {
      issue(local);
    }
    commit_async();
  }
  for (int local = 0; local < my_tiles; ++local) {
    if (local + DECODE_STAGES - 1 < my_tiles) {
      issue(local + DECODE_STAGES - 1);
    }
    commit_async();
    wait_async<DECODE_STAGES - 1>();
    consume(local);
  }
  wait_async<0>();

  // ---- Merge the token groups of this warp ---------------------------------------
#pragma unroll
  for (int offset = L::LANES_PER_TOKEN; offset < WARP_LANES; offset *= 2) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const float other_max = __shfl_xor_sync(ALL_LANES, run_max[r], offset);
      const float other_sum = __shfl_xor_sync(ALL_LANES, run_sum[r], offset);
      const float new_max = fmaxf(run_max[r], other_max);
      const float base = usable_max(new_max);
      const float mine = exp2f(run_max[r] - base);
      const float theirs = exp2f(other_max - base);
      run_max[r] = new_max;
      run_sum[r] = run_sum[r] * mine + other_sum * theirs;
#pragma unroll
      for (int e = 0; e < DPL; ++e) {
        const float other = __shfl_xor_sync(ALL_LANES, acc[r][e], offset);
        acc[r][e] = acc[r][e] * mine + other * theirs;
      }
    }
  }

  // ---- Publish each warp's state; the ring's bytes are reused ----------------------
  __syncthreads();
  typename L::Merge merge(shared);
  if (token_group == 0) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
#pragma unroll
      for (int e = 0; e < DPL; ++e) {
        merge.acc(warp_idx, r, token_lane * DPL + e) = acc[r][e];
      }
      if (token_lane == 0) {
        merge.publish_stats(warp_idx, r, run_max[r], run_sum[r]);
      }
    }
  }
  __syncthreads();
}

} // namespace pagecheck

#endif // PAGECHECK_PAGED_DECODE_WALK_CUH
