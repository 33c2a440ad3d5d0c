// paged_prefill: attention for long queries (L > 8) on CUDA cores, any dtype.
//
// Body of an MLX fast::cuda_kernel (header: paged_common.cuh). Template
// arguments: T, HEAD_DIM (at most 256), CAUSAL, TABLE, SCALE_BITS, SCALE_NEGATIVE
// (paged_common.cuh).
// Inputs and output as paged_decode. Used for float32 and for head
// dims the tensor-core variant (paged_prefill_mma) does not take.
//
// Ownership: block x owns (request_idx, kv_head_idx, row_tile_idx): the
// ROW_TILE query rows [row_tile_idx * 64, +64) of that kv head's G * L rows
// (position-major) and writes exactly those rows of `out`. Thread
// (row_group, key_lane) = (tid / 8, tid % 8) owns rows 4 row_group .. +3 of
// the tile: their running max and sum (the same in all 8 lanes of the row
// group) and their output dims key_lane, key_lane + 8, ... in float32
// registers; for the scores it owns keys key_lane + 8c of the key tile.
// The block walks the request's pages in key tiles of KEY_TILE slots that
// never cross a page (one page id per tile): all threads copy the tile's K/V
// into shared memory as float32, compute scores from the shared query tile,
// publish the weights, then accumulate weights times values. Under the causal
// mask the walk stops after the last key the tile's last row can see.
// Launch: 128 threads per block, blocks = B * H_kv * ceil(G * L / 64),
// dynamic shared memory 4 * (96 * KS + 32 * HEAD_DIM + 64 * 33) bytes with
// KS = HEAD_DIM + 1 for even HEAD_DIM, else HEAD_DIM.
using namespace pagecheck;
constexpr int THREADS = 128;
constexpr int ROW_TILE = 64;
constexpr int KEY_TILE = 32;
constexpr int KEY_LANES = 8;
constexpr int ROWS_PER_THREAD = ROW_TILE / (THREADS / KEY_LANES);
constexpr int KEYS_PER_THREAD = KEY_TILE / KEY_LANES;
constexpr int DIMS_PER_THREAD = ceil_div(HEAD_DIM, KEY_LANES);
// Odd row strides keep column reads of the query and key tiles conflict-free.
constexpr int KS = HEAD_DIM % 2 == 0 ? HEAD_DIM + 1 : HEAD_DIM;
constexpr int PS = KEY_TILE + 1;
constexpr int SHARED_BYTES = 4 *
    (ROW_TILE * KS + KEY_TILE * KS + KEY_TILE * HEAD_DIM + ROW_TILE * PS);
require_shared_bytes(SHARED_BYTES);
extern __shared__ __align__(128) unsigned char shared[];
float* q_tile = reinterpret_cast<float*>(shared);
float* k_tile = q_tile + ROW_TILE * KS;
float* v_tile = k_tile + KEY_TILE * KS;
float* p_tile = v_tile + KEY_TILE * HEAD_DIM;

// ---- Positions -----------------------------------------------------------------
const PagedGeometry geo = make_geometry(
    query_shape.data(), key_pages_shape.data(), block_table_shape.data(), TABLE);
const RowBlock block = row_block(geo, blockIdx.x, ROW_TILE);
const int request_idx = block.request_idx;
const int kv_head_idx = block.kv_head_idx;
const int row_group = threadIdx.x / KEY_LANES;
const int key_lane = threadIdx.x % KEY_LANES;
const int context_len = request_context(geo, context_lens, request_idx);
const int row_first = block.row_begin;

// ---- Query tile into shared memory, pre-scaled for base-2 softmax -----------------
const float q_scale = scale_of(SCALE_BITS, SCALE_NEGATIVE) * LOG2_E;
for (int idx = threadIdx.x; idx < ROW_TILE * HEAD_DIM; idx += THREADS) {
  const int r = idx / HEAD_DIM;
  const int dim = idx % HEAD_DIM;
  const QueryRow row = query_row(
      geo, request_idx, kv_head_idx, row_first + r, context_len, CAUSAL);
  q_tile[r * KS + dim] =
      row.valid ? to_float(query[row.offset + dim]) * q_scale : 0.0f;
}
QueryRow rows[ROWS_PER_THREAD];
#pragma unroll
for (int i = 0; i < ROWS_PER_THREAD; ++i) {
  rows[i] = query_row(
      geo, request_idx, kv_head_idx,
      row_first + row_group * ROWS_PER_THREAD + i, context_len, CAUSAL);
}

// ---- Key range: the causal limit of the tile's last row bounds the walk ------------
const int pos_end = row_tile_key_end(geo, request_idx, kv_head_idx, row_first, ROW_TILE, context_len, CAUSAL);
const int tiles_per_page = ceil_div(geo.page_size, KEY_TILE);
const int num_tiles = count_tiles(pos_end, geo.page_size, KEY_TILE, tiles_per_page);
const TileDivisor tile_divisor(tiles_per_page);
const int32_t* table_row =
    block_table + static_cast<long long>(request_idx) * geo.max_pages;

float run_max[ROWS_PER_THREAD];
float run_sum[ROWS_PER_THREAD];
float acc[ROWS_PER_THREAD][DIMS_PER_THREAD];
#pragma unroll
for (int i = 0; i < ROWS_PER_THREAD; ++i) {
  run_max[i] = NEG_INF;
  run_sum[i] = 0.0f;
#pragma unroll
  for (int j = 0; j < DIMS_PER_THREAD; ++j) {
    acc[i][j] = 0.0f;
  }
}

for (int tile_idx = 0; tile_idx < num_tiles; ++tile_idx) {
  const PageTile tile =
      page_tile(tile_idx, KEY_TILE, tile_divisor, geo.page_size, pos_end);
  const int page_id = tile_page_id(geo, table_row, request_idx, tile);
  const long long base = page_offset(geo, page_id, kv_head_idx) +
      static_cast<long long>(tile.slot_begin) * HEAD_DIM;

  // ---- K/V tile into shared memory (zeros past the tile's count) -------------------
  __syncthreads();
  for (int idx = threadIdx.x; idx < KEY_TILE * HEAD_DIM; idx += THREADS) {
    const int token = idx / HEAD_DIM;
    const int dim = idx % HEAD_DIM;
    const bool live = page_id >= 0 && token < tile.count;
    const long long src = base + static_cast<long long>(token) * HEAD_DIM + dim;
    k_tile[token * KS + dim] = live ? to_float(key_pages[src]) : 0.0f;
    v_tile[token * HEAD_DIM + dim] = live ? to_float(value_pages[src]) : 0.0f;
  }
  __syncthreads();

  // ---- Scores for this thread's rows and keys ------------------------------------------
  float score[ROWS_PER_THREAD][KEYS_PER_THREAD];
#pragma unroll
  for (int i = 0; i < ROWS_PER_THREAD; ++i) {
#pragma unroll
    for (int c = 0; c < KEYS_PER_THREAD; ++c) {
      score[i][c] = 0.0f;
    }
  }
  for (int dim = 0; dim < HEAD_DIM; ++dim) {
    float q_col[ROWS_PER_THREAD];
    float k_col[KEYS_PER_THREAD];
#pragma unroll
    for (int i = 0; i < ROWS_PER_THREAD; ++i) {
      q_col[i] = q_tile[(row_group * ROWS_PER_THREAD + i) * KS + dim];
    }
#pragma unroll
    for (int c = 0; c < KEYS_PER_THREAD; ++c) {
      k_col[c] = k_tile[(key_lane + KEY_LANES * c) * KS + dim];
    }
#pragma unroll
    for (int i = 0; i < ROWS_PER_THREAD; ++i) {
#pragma unroll
      for (int c = 0; c < KEYS_PER_THREAD; ++c) {
        score[i][c] = fmaf(q_col[i], k_col[c], score[i][c]);
      }
    }
  }

  // ---- Online softmax; weights go to shared memory -------------------------------------
#pragma unroll
  for (int i = 0; i < ROWS_PER_THREAD; ++i) {
    float tile_max = NEG_INF;
#pragma unroll
    for (int c = 0; c < KEYS_PER_THREAD; ++c) {
      const int token = key_lane + KEY_LANES * c;
      const bool visible = token < tile.count &&
          tile.pos_begin + token <= rows[i].key_limit;
      score[i][c] = visible ? score[i][c] : NEG_INF;
      tile_max = fmaxf(tile_max, score[i][c]);
    }
    const float new_max = fmaxf(run_max[i], group_max<KEY_LANES>(tile_max));
    const float base_max = usable_max(new_max);
    const float rescale = exp2f(run_max[i] - base_max);
    run_max[i] = new_max;
    float tile_sum = 0.0f;
#pragma unroll
    for (int c = 0; c < KEYS_PER_THREAD; ++c) {
      const float weight = exp2f(score[i][c] - base_max);
      tile_sum += weight;
      p_tile[(row_group * ROWS_PER_THREAD + i) * PS + key_lane + KEY_LANES * c] =
          weight;
    }
    run_sum[i] = run_sum[i] * rescale + group_sum<KEY_LANES>(tile_sum);
#pragma unroll
    for (int j = 0; j < DIMS_PER_THREAD; ++j) {
      acc[i][j] *= rescale;
    }
  }
  __syncthreads();

  // ---- Output += weights x values ----------------------------------------------------------
  for (int token = 0; token < tile.count; ++token) {
    float weight[ROWS_PER_THREAD];
#pragma unroll
    for (int i = 0; i < ROWS_PER_THREAD; ++i) {
      weight[i] = p_tile[(row_group * ROWS_PER_THREAD + i) * PS + token];
    }
#pragma unroll
    for (int j = 0; j < DIMS_PER_THREAD; ++j) {
      const int dim = key_lane + KEY_LANES * j;
      const float value = dim < HEAD_DIM ? v_tile[token * HEAD_DIM + dim] : 0.0f;
#pragma unroll
      for (int i = 0; i < ROWS_PER_THREAD; ++i) {
        acc[i][j] = fmaf(weight[i], value, acc[i][j]);
      }
    }
  }
}

// ---- Normalise and store this thread's rows and dims -------------------------------------
#pragma unroll
for (int i = 0; i < ROWS_PER_THREAD; ++i) {
  if (rows[i].valid) {
    const float inv_total = run_sum[i] > 0.0f ? 1.0f / run_sum[i] : 0.0f;
#pragma unroll
    for (int j = 0; j < DIMS_PER_THREAD; ++j) {
      const int dim = key_lane + KEY_LANES * j;
      if (dim < HEAD_DIM) {
        out[rows[i].offset + dim] = from_float<T>(acc[i][j] * inv_total);
      }
    }
  }
}
