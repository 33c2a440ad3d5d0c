// Metal mirror of the CUDA-core decode walk (paged_decode_walk.cuh), its
// merge region (paged_decode_merge.cuh) and split_tiles
// (paged_decode_walker.cuh). Same ownership: DECODE_WARPS simdgroups walk the
// tiles of one (request, kv head) for up to ROWS query rows, tile by tile
// (tile_begin + simdgroup, + DECODE_WARPS, ...); a group of LANES_PER_TOKEN
// lanes owns one token of a step, lane token_lane the dims [token_lane *
// DIMS_PER_LANE, +DIMS_PER_LANE). What differs: Metal has no asynchronous
// copy, so each lane loads its dims of K and V straight from device memory
// when it reaches them, and there is no staging ring; and there is no
// tensor-core walk (MMA is always false on Metal).
#ifndef PAGECHECK_PAGED_DECODE_WALK_METAL_H
#define PAGECHECK_PAGED_DECODE_WALK_METAL_H

namespace pagecheck {

constant constexpr int DECODE_WARPS = 4;
constant constexpr int DECODE_THREADS = DECODE_WARPS * WARP_LANES;
constant constexpr int DECODE_STEPS_PER_TILE = 4;

template <typename T, int HEAD_DIM, int ROWS>
struct DecodeLayout {
  static constant constexpr const int VEC = 16 / int(sizeof(T));
  static constant constexpr const int NUM_VECS = ceil_div(HEAD_DIM, VEC);
  static constant constexpr const int VECS_PER_LANE = ceil_div(NUM_VECS, WARP_LANES);
  static constant constexpr const int LANES_PER_TOKEN = next_pow2(ceil_div(NUM_VECS, VECS_PER_LANE));
  static constant constexpr const int TOKENS_PER_STEP = WARP_LANES / LANES_PER_TOKEN;
  static constant constexpr const int TILE_TOKENS = TOKENS_PER_STEP * DECODE_STEPS_PER_TILE;
  static constant constexpr const int DIMS_PER_LANE = VECS_PER_LANE * VEC;
  static constant constexpr const int ACC_ELEMS = LANES_PER_TOKEN * DIMS_PER_LANE;
  // Threadgroup floats of the merge region: max[W][ROWS], sum[W][ROWS],
  // acc[W][ROWS][ACC_ELEMS].
  static constant constexpr const int MERGE_FLOATS = DECODE_WARPS * ROWS * (ACC_ELEMS + 2);
};

struct MergedState {
  float max;
  float sum;
  float acc;
};

template <int ROWS, int ACC_ELEMS>
inline MergedState merged_state(threadgroup const float* merge, int row, int dim) {
  threadgroup const float* row_max = merge;
  threadgroup const float* row_sum = merge + DECODE_WARPS * ROWS;
  threadgroup const float* row_acc = row_sum + DECODE_WARPS * ROWS;
  MergedState s;
  s.max = -INFINITY;
  for (int w = 0; w < DECODE_WARPS; ++w) {
    s.max = metal::max(s.max, row_max[w * ROWS + row]);
  }
  const float base = usable_max(s.max);
  s.sum = 0.0f;
  s.acc = 0.0f;
  for (int w = 0; w < DECODE_WARPS; ++w) {
    const float weight = metal::exp2(row_max[w * ROWS + row] - base);
    s.sum += row_sum[w * ROWS + row] * weight;
    s.acc += row_acc[(w * ROWS + row) * ACC_ELEMS + dim] * weight;
  }
  return s;
}

struct TileRange {
  int begin;
  int end;
};

inline TileRange split_tiles(int context_len, int page_size, int tile_tokens, int split_idx, int num_splits) {
  const int tiles_per_page = ceil_div(page_size, tile_tokens);
  const int total = count_tiles(context_len, page_size, tile_tokens, tiles_per_page);
  const int share = ceil_div(ceil_div(total, num_splits), DECODE_WARPS) * DECODE_WARPS;
  TileRange range;
  range.begin = metal::min(total, split_idx * share);
  range.end = metal::min(total, range.begin + share);
  return range;
}

template <typename T, int HEAD_DIM, int ROWS, bool CAUSAL, typename QPtr, typename KvPtr, typename TablePtr>
void decode_walk(
    QPtr query,
    KvPtr key_pages,
    KvPtr value_pages,
    TablePtr block_table,
    thread const PagedGeometry& geo,
    float scale,
    int request_idx,
    int kv_head_idx,
    int row_begin,
    int context_len,
    int tile_begin,
    int tile_end,
    threadgroup float* merge,
    uint lane,
    uint warp) {
  using L = DecodeLayout<T, HEAD_DIM, ROWS>;
  constexpr int DPL = L::DIMS_PER_LANE;
  constexpr int STEPS = DECODE_STEPS_PER_TILE;

  // ---- Positions -------------------------------------------------------------
  const int lane_idx = int(lane);
  const int warp_idx = int(warp);
  const int token_lane = lane_idx % L::LANES_PER_TOKEN;
  const int token_group = lane_idx / L::LANES_PER_TOKEN;

  // ---- Query rows into registers, pre-scaled for base-2 softmax ----------------
  const float q_scale = scale * LOG2_E;
  float q[ROWS][DPL];
  int key_limit[ROWS];
  for (int r = 0; r < ROWS; ++r) {
    const QueryRow row = query_row(geo, request_idx, kv_head_idx, row_begin + r, context_len, CAUSAL);
    key_limit[r] = row.key_limit;
    for (int e = 0; e < DPL; ++e) {
      const int dim = token_lane * DPL + e;
      q[r][e] = (row.valid && dim < HEAD_DIM) ? float(query[row.offset + dim]) * q_scale : 0.0f;
    }
  }

  float run_max[ROWS];
  float run_sum[ROWS];
  float acc[ROWS][DPL];
  for (int r = 0; r < ROWS; ++r) {
    run_max[r] = -INFINITY;
    run_sum[r] = 0.0f;
    for (int e = 0; e < DPL; ++e) {
      acc[r][e] = 0.0f;
    }
  }

  // ---- This warp's tiles, each read straight from device memory ------------------
  const int tiles_per_page = ceil_div(geo.page_size, L::TILE_TOKENS);
  const int first = tile_begin + warp_idx;
  const int my_tiles = first < tile_end ? ceil_div(tile_end - first, DECODE_WARPS) : 0;
  for (int local = 0; local < my_tiles; ++local) {
    const PageTile tile = page_tile(
        tile_begin + warp_idx + local * DECODE_WARPS, L::TILE_TOKENS, tiles_per_page, geo.page_size, context_len);
    const int page_id = tile_page_id(geo, block_table, request_idx, tile);
    const long base = page_offset(geo, page_id, kv_head_idx) + long(tile.slot_begin) * HEAD_DIM;

    float weight[STEPS][ROWS];
    for (int step = 0; step < STEPS; ++step) {
      const int token = step * L::TOKENS_PER_STEP + token_group;
      const bool live = page_id >= 0 && token < tile.count;
      const long src = live ? base + long(token) * HEAD_DIM : 0;
      float k_row[DPL];
      for (int e = 0; e < DPL; ++e) {
        const int dim = token_lane * DPL + e;
        k_row[e] = (live && dim < HEAD_DIM) ? float(key_pages[src + dim]) : 0.0f;
      }
      const int pos = tile.pos_begin + token;
      for (int r = 0; r < ROWS; ++r) {
        float dot = 0.0f;
        for (int e = 0; e < DPL; ++e) {
          dot = metal::fma(q[r][e], k_row[e], dot);
        }
        dot = group_sum<L::LANES_PER_TOKEN>(dot);
        const bool visible = token < tile.count && pos <= key_limit[r];
        weight[step][r] = visible ? dot : -INFINITY;
      }
    }
    for (int r = 0; r < ROWS; ++r) {
      float tile_max = weight[0][r];
      for (int step = 1; step < STEPS; ++step) {
        tile_max = metal::max(tile_max, weight[step][r]);
      }
      const float new_max = metal::max(run_max[r], tile_max);
      const float base_max = usable_max(new_max);
      const float rescale = metal::exp2(run_max[r] - base_max);
      run_max[r] = new_max;
      run_sum[r] *= rescale;
      for (int e = 0; e < DPL; ++e) {
        acc[r][e] *= rescale;
      }
      for (int step = 0; step < STEPS; ++step) {
        weight[step][r] = metal::exp2(weight[step][r] - base_max);
        run_sum[r] += weight[step][r];
      }
    }
    for (int step = 0; step < STEPS; ++step) {
      const int token = step * L::TOKENS_PER_STEP + token_group;
      const bool live = page_id >= 0 && token < tile.count;
      const long src = live ? base + long(token) * HEAD_DIM : 0;
      for (int e = 0; e < DPL; ++e) {
        const int dim = token_lane * DPL + e;
        const float value = (live && dim < HEAD_DIM) ? float(value_pages[src + dim]) : 0.0f;
        for (int r = 0; r < ROWS; ++r) {
          acc[r][e] = metal::fma(weight[step][r], value, acc[r][e]);
        }
      }
    }
  }

  // ---- Merge the token groups of this simdgroup -----------------------------------
  for (ushort offset = L::LANES_PER_TOKEN; offset < WARP_LANES; offset *= 2) {
    for (int r = 0; r < ROWS; ++r) {
      const float other_max = simd_shuffle_xor(run_max[r], offset);
      const float other_sum = simd_shuffle_xor(run_sum[r], offset);
      const float new_max = metal::max(run_max[r], other_max);
      const float base_max = usable_max(new_max);
      const float mine = metal::exp2(run_max[r] - base_max);
      const float theirs = metal::exp2(other_max - base_max);
      run_max[r] = new_max;
      run_sum[r] = run_sum[r] * mine + other_sum * theirs;
      for (int e = 0; e < DPL; ++e) {
        const float other = simd_shuffle_xor(acc[r][e], offset);
        acc[r][e] = acc[r][e] * mine + other * theirs;
      }
    }
  }

  // ---- Publish each simdgroup's state -------------------------------------------------
  threadgroup float* row_max = merge;
  threadgroup float* row_sum = merge + DECODE_WARPS * ROWS;
  threadgroup float* row_acc = row_sum + DECODE_WARPS * ROWS;
  if (token_group == 0) {
    for (int r = 0; r < ROWS; ++r) {
      for (int e = 0; e < DPL; ++e) {
        row_acc[(warp_idx * ROWS + r) * L::ACC_ELEMS + token_lane * DPL + e] = acc[r][e];
      }
      if (token_lane == 0) {
        row_max[warp_idx * ROWS + r] = run_max[r];
        row_sum[warp_idx * ROWS + r] = run_sum[r];
      }
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
}

} // namespace pagecheck

#endif // PAGECHECK_PAGED_DECODE_WALK_METAL_H
