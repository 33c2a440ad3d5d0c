// paged_prefill (Metal): mirror of paged_prefill.cu, for fast::metal_kernel
// (header: paged_common.metal.h). Template arguments: T, HEAD_DIM (at most
// 128 on Metal), CAUSAL, TABLE, SCALE_BITS, SCALE_NEGATIVE. Inputs and output as paged_decode.
//
// The CUDA kernel's algorithm and ownership with smaller tiles, because a
// threadgroup has 32 KB of memory on Apple GPUs: ROW_TILE 16 query rows per
// threadgroup (the host plan uses the same row tile on Metal) and KEY_TILE 16
// keys. Thread (row_group, key_lane) = (tid / 8, tid % 8) owns row row_group
// (its running max and sum, the same in the 8 lanes) and output dims
// key_lane + 8 j; for the scores it owns keys key_lane + 8 c. Key tiles never
// cross a page (one page id per tile); under the causal mask the walk stops
// after the last key the tile's last row can see.
using namespace pagecheck;
constexpr int THREADS = 128;
constexpr int ROW_TILE = 16;
constexpr int KEY_TILE = 16;
constexpr int KEY_LANES = 8;
constexpr int KEYS_PER_THREAD = KEY_TILE / KEY_LANES;
constexpr int DIMS_PER_THREAD = ceil_div(HEAD_DIM, KEY_LANES);
constexpr int KS = HEAD_DIM % 2 == 0 ? HEAD_DIM + 1 : HEAD_DIM;
constexpr int PS = KEY_TILE + 1;
threadgroup float q_tile[ROW_TILE * KS];
threadgroup float k_tile[KEY_TILE * KS];
threadgroup float v_tile[KEY_TILE * HEAD_DIM];
threadgroup float p_tile[ROW_TILE * PS];

// ---- Positions -----------------------------------------------------------------
const PagedGeometry geo = make_geometry(query_shape, key_pages_shape, block_table_shape, TABLE);
const int row_tiles = ceil_div(geo.rows, ROW_TILE);
const int block_idx = int(threadgroup_position_in_grid.x);
const int request_idx = block_idx / (geo.num_kv_heads * row_tiles);
const int kv_head_idx = (block_idx / row_tiles) % geo.num_kv_heads;
const int row_tile_idx = block_idx % row_tiles;
const int tid = int(thread_index_in_threadgroup);
const int row_group = tid / KEY_LANES;
const int key_lane = tid % KEY_LANES;
const int context_len = request_context(geo, context_lens, request_idx);
const int row_first = row_tile_idx * ROW_TILE;

// ---- Query tile into threadgroup memory, pre-scaled for base-2 softmax -------------
const float q_scale = scale_of(SCALE_BITS, SCALE_NEGATIVE) * LOG2_E;
for (int idx = tid; idx < ROW_TILE * HEAD_DIM; idx += THREADS) {
  const int r = idx / HEAD_DIM;
  const int dim = idx % HEAD_DIM;
  const QueryRow row = query_row(geo, request_idx, kv_head_idx, row_first + r, context_len, CAUSAL);
  q_tile[r * KS + dim] = row.valid ? float(query[row.offset + dim]) * q_scale : 0.0f;
}
const QueryRow my_row = query_row(geo, request_idx, kv_head_idx, row_first + row_group, context_len, CAUSAL);

// ---- Key range: the causal limit of the tile's last row bounds the walk ------------
const int last_row = metal::min(row_first + ROW_TILE, geo.rows) - 1;
const int tile_key_limit = query_row(geo, request_idx, kv_head_idx, last_row, context_len, CAUSAL).key_limit;
const int pos_end = metal::min(context_len, tile_key_limit + 1);
const int tiles_per_page = ceil_div(geo.page_size, KEY_TILE);
const int num_tiles = count_tiles(pos_end, geo.page_size, KEY_TILE, tiles_per_page);

float run_max = -INFINITY;
float run_sum = 0.0f;
float acc[DIMS_PER_THREAD];
for (int j = 0; j < DIMS_PER_THREAD; ++j) {
  acc[j] = 0.0f;
}

for (int tile_idx = 0; tile_idx < num_tiles; ++tile_idx) {
  const PageTile tile = page_tile(tile_idx, KEY_TILE, tiles_per_page, geo.page_size, pos_end);
  const int page_id = tile_page_id(geo, block_table, request_idx, tile);
  const long base = page_offset(geo, page_id, kv_head_idx) + long(tile.slot_begin) * HEAD_DIM;

  // ---- K/V tile into threadgroup memory (zeros past the tile's count) --------------
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (int idx = tid; idx < KEY_TILE * HEAD_DIM; idx += THREADS) {
    const int token = idx / HEAD_DIM;
    const int dim = idx % HEAD_DIM;
    const bool live = page_id >= 0 && token < tile.count;
    const long src = live ? base + long(token) * HEAD_DIM + dim : 0;
    k_tile[token * KS + dim] = live ? float(key_pages[src]) : 0.0f;
    v_tile[token * HEAD_DIM + dim] = live ? float(value_pages[src]) : 0.0f;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  // ---- Scores for this thread's row and keys; online softmax ---------------------------
  float score[KEYS_PER_THREAD];
  for (int c = 0; c < KEYS_PER_THREAD; ++c) {
    score[c] = 0.0f;
  }
  for (int dim = 0; dim < HEAD_DIM; ++dim) {
    const float q_value = q_tile[row_group * KS + dim];
    for (int c = 0; c < KEYS_PER_THREAD; ++c) {
      score[c] = metal::fma(q_value, k_tile[(key_lane + KEY_LANES * c) * KS + dim], score[c]);
    }
  }
  float tile_max = -INFINITY;
  for (int c = 0; c < KEYS_PER_THREAD; ++c) {
    const int token = key_lane + KEY_LANES * c;
    const bool visible = token < tile.count && tile.pos_begin + token <= my_row.key_limit;
    score[c] = visible ? score[c] : -INFINITY;
    tile_max = metal::max(tile_max, score[c]);
  }
  const float new_max = metal::max(run_max, group_max<KEY_LANES>(tile_max));
  const float base_max = usable_max(new_max);
  const float rescale = metal::exp2(run_max - base_max);
  run_max = new_max;
  float tile_sum = 0.0f;
  for (int c = 0; c < KEYS_PER_THREAD; ++c) {
    const float weight = metal::exp2(score[c] - base_max);
    tile_sum += weight;
    p_tile[row_group * PS + key_lane + KEY_LANES * c] = weight;
  }
  run_sum = run_sum * rescale + group_sum<KEY_LANES>(tile_sum);
  for (int j = 0; j < DIMS_PER_THREAD; ++j) {
    acc[j] *= rescale;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);

  // ---- Output += weights x values ----------------------------------------------------------
  for (int token = 0; token < tile.count; ++token) {
    const float weight = p_tile[row_group * PS + token];
    for (int j = 0; j < DIMS_PER_THREAD; ++j) {
      const int dim = key_lane + KEY_LANES * j;
      const float value = dim < HEAD_DIM ? v_tile[token * HEAD_DIM + dim] : 0.0f;
      acc[j] = metal::fma(weight, value, acc[j]);
    }
  }
}

// ---- Normalise and store this thread's row and dims -----------------------------------
if (my_row.valid) {
  const float inv_total = run_sum > 0.0f ? 1.0f / run_sum : 0.0f;
  for (int j = 0; j < DIMS_PER_THREAD; ++j) {
    const int dim = key_lane + KEY_LANES * j;
    if (dim < HEAD_DIM) {
      out[my_row.offset + dim] = static_cast<T>(acc[j] * inv_total);
    }
  }
}
