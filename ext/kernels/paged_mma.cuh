// Tensor-core helpers for paged_prefill_mma (sm_80+ mma.sync and ldmatrix).
//
// Fragment layouts are those of mma.sync.m16n8k16 with 16-bit inputs and
// float32 accumulators. In a warp, lane = 4 * group + pair:
//   A (16 x 16, row major), 4 words: a0 (row group,     cols 2 pair, +1)
//                                    a1 (row group + 8, cols 2 pair, +1)
//                                    a2 (row group,     cols 8 + 2 pair, +1)
//                                    a3 (row group + 8, cols 8 + 2 pair, +1)
//   B (16 x 8, k by n), 2 words:     b0 (k 2 pair, +1; n group)
//                                    b1 (k 8 + 2 pair, +1; n group)
//   C (16 x 8), 4 floats:            c0, c1 (row group,     cols 2 pair, +1)
//                                    c2, c3 (row group + 8, cols 2 pair, +1)
// The lower 16 bits of a word hold the element with the smaller index.
#ifndef PAGECHECK_PAGED_MMA_CUH
#define PAGECHECK_PAGED_MMA_CUH

namespace pagecheck {

__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Four 8x8 16-bit matrices; lanes 8m..8m+7 give the row addresses of matrix m
// and register m receives its fragment (lane holds row lane/4, cols 2(lane%4)).
__device__ __forceinline__ void load_matrix_x4(unsigned (&reg)[4], const void* row) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(reg[0]), "=r"(reg[1]), "=r"(reg[2]), "=r"(reg[3])
      : "r"(shared_address(row)));
}

// Two matrices (lanes 0..15 give addresses).
__device__ __forceinline__ void load_matrix_x2(unsigned (&reg)[2], const void* row) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
      : "=r"(reg[0]), "=r"(reg[1])
      : "r"(shared_address(row)));
}

// As load_matrix_x4, transposed: lane holds (rows 2(lane%4), +1; col lane/4).
__device__ __forceinline__ void load_matrix_x4_trans(unsigned (&reg)[4], const void* row) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(reg[0]), "=r"(reg[1]), "=r"(reg[2]), "=r"(reg[3])
      : "r"(shared_address(row)));
}

// c += a * b on one m16n8k16 tile.
__device__ __forceinline__ void mma_16816(
    float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1, __nv_bfloat16) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_16816(
    float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1, __half) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Round two floats to T and pack them into one word (lo in the low half).
__device__ __forceinline__ unsigned pack_pair(float lo, float hi, __nv_bfloat16) {
  __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<unsigned*>(&pair);
}
__device__ __forceinline__ unsigned pack_pair(float lo, float hi, __half) {
  __half2 pair = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<unsigned*>(&pair);
}

// The query rows of one warp in the prefill kernels' tiles: block x owns
// `rows_per_block` rows of one (request, kv head) (row_block), warp w rows
// 16w..16w+15 of them, and lane (group, pair) rows group and group + 8 in
// the fragment layouts above.
struct WarpRows {
  int request_idx;
  int kv_head_idx;
  int row_first; // the block's first row
  int context_len;
  int pair_idx;
  QueryRow rows[2];
};

__device__ __forceinline__ WarpRows warp_rows(
    const PagedGeometry& geo,
    const int32_t* context_lens,
    int rows_per_block,
    bool causal) {
  const RowBlock block = row_block(geo, blockIdx.x, rows_per_block);
  const int lane_idx = threadIdx.x % WARP_LANES;
  const int row = block.row_begin + (threadIdx.x / WARP_LANES) * 16 + lane_idx / 4;
  WarpRows w;
  w.request_idx = block.request_idx;
  w.kv_head_idx = block.kv_head_idx;
  w.row_first = block.row_begin;
  w.context_len = request_context(geo, context_lens, block.request_idx);
  w.pair_idx = lane_idx % 4;
  w.rows[0] = query_row(geo, w.request_idx, w.kv_head_idx, row, w.context_len, causal);
  w.rows[1] = query_row(geo, w.request_idx, w.kv_head_idx, row + 8, w.context_len, causal);
  return w;
}

// The A fragments of the warp's two query rows over all QK_CHUNKS * 16 dims,
// raw (the scale is applied to the float32 scores); zeros for a row past the
// kv head's rows.
template <typename T, int QK_CHUNKS>
__device__ __forceinline__ void load_query_fragments(
    unsigned (&q_frag)[QK_CHUNKS][4],
    const T* query,
    const QueryRow (&rows)[2],
    int pair_idx) {
#pragma unroll
  for (int kc = 0; kc < QK_CHUNKS; ++kc) {
#pragma unroll
    for (int part = 0; part < 4; ++part) {
      const QueryRow& row = rows[part % 2];
      const int dim = kc * 16 + (part / 2) * 8 + 2 * pair_idx;
      q_frag[kc][part] = row.valid ? *reinterpret_cast<const unsigned*>(query + row.offset + dim) : 0u;
    }
  }
}

// The warp's two rows of the output, normalised by their running sums (a row
// that saw no key, sum 0, is written as zeros): each lane writes 2 adjacent
// dims per row and n8 tile; rows past the kv head's rows are not written.
template <typename T, int O_TILES>
__device__ __forceinline__ void store_rows(
    T* out,
    const float (&out_acc)[O_TILES][4],
    const float (&run_sum)[2],
    const QueryRow (&rows)[2],
    int pair_idx) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float total = group_sum<4>(run_sum[half]);
    const float inv_total = total > 0.0f ? 1.0f / total : 0.0f;
    if (rows[half].valid) {
#pragma unroll
      for (int nt = 0; nt < O_TILES; ++nt) {
        const int dim = nt * 8 + 2 * pair_idx;
        *reinterpret_cast<unsigned*>(out + rows[half].offset + dim) = pack_pair(
            out_acc[nt][2 * half] * inv_total, out_acc[nt][2 * half + 1] * inv_total, T{});
      }
    }
  }
}

// Where K/V rows sit in a shared-memory stage, in 16-byte chunks of 8
// elements. Either layout keeps copies and ldmatrix free of bank conflicts.
// Swizzled (SWIZZLE, rows of a multiple of 64 elements): unpadded, chunk c of
// row r at c ^ (r % 8), so the 8 rows of an ldmatrix matrix fall in 8
// different bank groups, and so do the 8 chunks that 8 lanes copy from one
// 128-byte line. Padded (otherwise, and always for bulk copies, which write
// whole rows): rows of HEAD_DIM + 8 elements. What padding costs: the two rows
// that one warp-wide cp.async writes are 16 bytes out of step, its shared
// stores split into ~10 wavefronts instead of 4, and each wavefront asks L2
// for its own sectors: 24 sectors per 16 needed, 1.5x the L2 traffic of the
// same bytes (Nsight Compute on the H200, ext/kernels/NOTES.md). Which one
// runs faster depends on the grid; the launch plan chooses.
template <int HEAD_DIM, bool SWIZZLE>
struct SharedRows {
  static_assert(HEAD_DIM % 8 == 0, "rows of whole 16-byte chunks");
  static constexpr bool SWIZZLED = SWIZZLE && HEAD_DIM % 64 == 0;
  static constexpr int STRIDE = SWIZZLED ? HEAD_DIM : HEAD_DIM + 8;
  __device__ __forceinline__ static int at(int row, int chunk) {
    return row * STRIDE + (SWIZZLED ? chunk ^ (row & 7) : chunk) * 8;
  }
  // at(row, chunk + 8 k) == at(row, chunk) + 64 k and at(row + 8 k, chunk) ==
  // at(row, chunk) + 8 k STRIDE in either layout (the swizzle permutes within
  // aligned groups of 8 chunks, by row % 8): a walk keeps a few per-lane
  // offsets and reaches the rest by compile-time steps.
  static constexpr int CHUNK_GROUP_STEP = 64;
};

// One 16-byte chunk of a K row and of a V row into the shared rows ROWS at
// (token, chunk), from element `src` of the pools, or zeros where `live` is
// false: by cp.async with `vector_copy` (the caller commits and waits), else
// by plain loads and stores. The chunk step of copy_tile_rows and
// copy_position_rows.
template <typename T, typename ROWS>
__device__ __forceinline__ void copy_row_chunk(
    T* stage_k,
    T* stage_v,
    const T* key_pages,
    const T* value_pages,
    int token,
    int chunk,
    long long src,
    bool live,
    bool vector_copy) {
  T* dst_k = stage_k + ROWS::at(token, chunk);
  T* dst_v = stage_v + ROWS::at(token, chunk);
  if (vector_copy) {
    copy_async16(dst_k, key_pages + src, live);
    copy_async16(dst_v, value_pages + src, live);
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      dst_k[e] = live ? key_pages[src + e] : from_float<T>(0.0f);
      dst_v[e] = live ? value_pages[src + e] : from_float<T>(0.0f);
    }
  }
}

// Copy the K and V rows of one tile into the shared rows ROWS: chunk idx goes
// to thread `first + k * STRIDE` (0 <= first < STRIDE, the copying threads).
// Rows at or past `count`, or of an unmapped page, are zero-filled instead of
// read. With `vector_copy` the chunks travel by cp.async (the caller commits
// and waits); otherwise by plain loads and stores.
//
// Where STRIDE is a whole number of rows (D 128 by a warp: 2 rows a step) and
// the copy is by cp.async, a thread keeps one chunk column and steps
// STRIDE / (chunks per row) rows at a time: its two source pointers are
// computed once per tile and each step adds a compile-time distance, so the
// unrolled copy is 2 cp.async per step and little else. A row past `count`
// keeps its stepped address but copies 0 bytes (zero fill, nothing read); an
// unmapped page's rows point at the pools' first chunk.
template <typename T, int HEAD_DIM, int TILE, typename ROWS, int STRIDE>
__device__ __forceinline__ void copy_tile_rows(
    T* stage_k,
    T* stage_v,
    const T* key_pages,
    const T* value_pages,
    long long base,
    int count,
    bool mapped,
    bool vector_copy,
    int first) {
  constexpr int VECS_PER_ROW = HEAD_DIM / 8;
  if constexpr (STRIDE % VECS_PER_ROW == 0) {
    if (vector_copy) {
      constexpr int ROW_STEP = STRIDE / VECS_PER_ROW;
      const int chunk = first % VECS_PER_ROW;
      const int first_token = first / VECS_PER_ROW;
      const long long first_src = mapped ? base + static_cast<long long>(first_token) * HEAD_DIM + chunk * 8 : 0;
      const T* src_k = key_pages + first_src;
      const T* src_v = value_pages + first_src;
#pragma unroll
      for (int step = 0; step < ceil_div(TILE, ROW_STEP); ++step) {
        const int token = first_token + step * ROW_STEP;
        if (ROW_STEP * (step + 1) <= TILE || token < TILE) {
          const bool live = mapped && token < count;
          copy_async16(stage_k + ROWS::at(token, chunk), src_k + step * ROW_STEP * HEAD_DIM, live);
          copy_async16(stage_v + ROWS::at(token, chunk), src_v + step * ROW_STEP * HEAD_DIM, live);
        }
      }
      return;
    }
  }
  for (int idx = first; idx < TILE * VECS_PER_ROW; idx += STRIDE) {
    const int token = idx / VECS_PER_ROW;
    const int chunk = idx % VECS_PER_ROW;
    const bool live = mapped && token < count;
    const long long src = live ? base + static_cast<long long>(token) * HEAD_DIM + chunk * 8 : 0;
    copy_row_chunk<T, ROWS>(stage_k, stage_v, key_pages, value_pages, token, chunk, src, live, vector_copy);
  }
}

// As copy_tile_rows for a tile of positions [pos_begin, pos_begin + count) that may span pages: each
// row finds its own page (page_id_at) and slot, so the tile length does not depend on the page size.
// Rows at or past `count`, or in a page the table does not map, are zero-filled.
template <typename T, int HEAD_DIM, int TILE, typename ROWS>
__device__ __forceinline__ void copy_position_rows(
    T* stage_k,
    T* stage_v,
    const T* key_pages,
    const T* value_pages,
    const PagedGeometry& geo,
    const int32_t* table_row,
    int request_idx,
    int kv_head_idx,
    int pos_begin,
    int count,
    bool vector_copy,
    int first,
    int stride) {
  constexpr int VECS_PER_ROW = HEAD_DIM / 8;
  for (int idx = first; idx < TILE * VECS_PER_ROW; idx += stride) {
    const int token = idx / VECS_PER_ROW;
    const int chunk = idx % VECS_PER_ROW;
    const int pos = pos_begin + token;
    const int page_idx = pos / geo.page_size;
    const int page_id = token < count ? page_id_at(geo, table_row, request_idx, page_idx) : -1;
    const bool live = page_id >= 0;
    const long long src = live
        ? page_offset(geo, page_id, kv_head_idx) +
            static_cast<long long>(pos - page_idx * geo.page_size) * HEAD_DIM + chunk * 8
        : 0;
    copy_row_chunk<T, ROWS>(stage_k, stage_v, key_pages, value_pages, token, chunk, src, live, vector_copy);
  }
}

// 2^x by the special-function unit alone (results below 2^-126 flush to 0,
// which no softmax weight can tell apart from 0).
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Moves the running max of this lane's row `half` (0: row group, 1: group + 8)
// to `new_max` (scaled, base 2, shared by the row's 4 lanes) and rescales the
// row's running sum; `rescale` gets the factor the row's output accumulators
// take (rescale_rows): exactly 1 where the max stays. Returns the base the
// tile's weights are taken against: the new max, or 0 while it is still -inf.
// `exp2` is the exponential the caller's softmax uses.
template <typename Exp2>
__device__ __forceinline__ float next_running_max(
    float (&run_max)[2],
    float (&run_sum)[2],
    int half,
    float new_max,
    Exp2 exp2,
    float& rescale) {
  const float base = usable_max(new_max);
  rescale = new_max == run_max[half] ? 1.0f : exp2(run_max[half] - base);
  run_max[half] = new_max;
  run_sum[half] *= rescale;
  return base;
}

// Multiplies row `half`'s output accumulators by `rescale`, skipped when no
// lane's max moved (after the first tiles that is rare).
template <int O_TILES>
__device__ __forceinline__ void rescale_rows(float (&out_acc)[O_TILES][4], int half, float rescale) {
  if (__any_sync(ALL_LANES, rescale != 1.0f)) {
#pragma unroll
    for (int nt = 0; nt < O_TILES; ++nt) {
      out_acc[nt][2 * half] *= rescale;
      out_acc[nt][2 * half + 1] *= rescale;
    }
  }
}

// next_running_max, then rescale_rows at once.
template <int O_TILES, typename Exp2>
__device__ __forceinline__ float move_running_max(
    float (&out_acc)[O_TILES][4],
    float (&run_max)[2],
    float (&run_sum)[2],
    int half,
    float new_max,
    Exp2 exp2) {
  float rescale;
  const float base = next_running_max(run_max, run_sum, half, new_max, exp2, rescale);
  rescale_rows(out_acc, half, rescale);
  return base;
}

// Copy key tile `tile` (position_tile) of the warp's (request, kv head) from
// the pools into a ring stage's K and V rows (layout ROWS), with the THREADS
// threads numbered `thread` 0..THREADS-1 (every thread of a block, or its
// producer warpgroup). A tile inside one page (always, where pages
// hold whole tiles, and in the dense view) has one page id, looked up once; a
// tile across pages looks up each row's page, a table read before every
// row's copy (~25% slower at pages of 128 on the H200, so it is kept to the
// tiles that need it).
template <typename T, int HEAD_DIM, int TILE, typename ROWS, int THREADS>
__device__ __forceinline__ void copy_key_tile(
    const PagedGeometry& geo,
    const int32_t* table_row,
    const WarpRows& warp,
    const PageTile& tile,
    const T* key_pages,
    const T* value_pages,
    T* stage_k,
    T* stage_v,
    bool vector_copy,
    int thread) {
  if (tile.slot_begin + tile.count <= geo.page_size) {
    const int page_id = tile_page_id(geo, table_row, warp.request_idx, tile);
    const long long base =
        page_offset(geo, page_id, warp.kv_head_idx) + static_cast<long long>(tile.slot_begin) * HEAD_DIM;
    copy_tile_rows<T, HEAD_DIM, TILE, ROWS, THREADS>(
        stage_k, stage_v, key_pages, value_pages, base, tile.count, page_id >= 0, vector_copy, thread);
  } else {
    copy_position_rows<T, HEAD_DIM, TILE, ROWS>(
        stage_k, stage_v, key_pages, value_pages, geo, table_row, warp.request_idx, warp.kv_head_idx,
        tile.pos_begin, tile.count, vector_copy, thread, THREADS);
  }
}

// One online-softmax step on the score fragments of a 16-row warp tile: mask
// the keys past the tile or past the row's causal limit, scale to base 2,
// update the running max (shared by the 4 lanes of a group) and the per-lane
// running sum of this lane's two rows (group and group + 8), rescale the
// output accumulators, and turn the scores into weights in place.
// `upper_rows` (the same in every lane) says whether rows 8..15 hold any query
// row: a decode block of G * L <= 8 rows leaves them empty, and their half of
// the work is skipped (their weights are 0). The output is rescaled only when
// some row's max moved, which after the first tiles is rare. Exponentials are
// exp2_ftz: the special-function unit alone, no denormal range steps.
template <int S_TILES, int O_TILES>
__device__ __forceinline__ void fragment_softmax(
    float (&score)[S_TILES][4],
    float (&out_acc)[O_TILES][4],
    float (&run_max)[2],
    float (&run_sum)[2],
    const QueryRow (&rows)[2],
    const PageTile& tile,
    int pair_idx,
    float score_scale,
    bool upper_rows = true) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    if (half == 1 && !upper_rows) {
#pragma unroll
      for (int nt = 0; nt < S_TILES; ++nt) {
        score[nt][2] = 0.0f;
        score[nt][3] = 0.0f;
      }
      continue;
    }
    float tile_max = NEG_INF;
#pragma unroll
    for (int nt = 0; nt < S_TILES; ++nt) {
#pragma unroll
      for (int col = 0; col < 2; ++col) {
        const int token = nt * 8 + 2 * pair_idx + col;
        const bool visible = token < tile.count &&
            tile.pos_begin + token <= rows[half].key_limit;
        float& value = score[nt][2 * half + col];
        value = visible ? value * score_scale : NEG_INF;
        tile_max = fmaxf(tile_max, value);
      }
    }
    const float base = move_running_max(out_acc, run_max, run_sum, half, fmaxf(run_max[half], group_max<4>(tile_max)),
                                        [](float x) { return exp2_ftz(x); });
#pragma unroll
    for (int nt = 0; nt < S_TILES; ++nt) {
#pragma unroll
      for (int col = 0; col < 2; ++col) {
        float& value = score[nt][2 * half + col];
        value = exp2_ftz(value - base);
        run_sum[half] += value;
      }
    }
  }
}

} // namespace pagecheck

#endif // PAGECHECK_PAGED_MMA_CUH
