// Metal mirror of paged_common.cuh: the same helpers for the Metal kernels
// (fast::metal_kernel), built only on macOS. See the CUDA file for the why of
// each piece; names and meanings are kept identical so the two read side by
// side. MLX passes a small input in the constant address space and a large
// one in device memory, so helpers that read inputs take the pointer type as
// a template parameter.
#ifndef PAGECHECK_PAGED_COMMON_METAL_H
#define PAGECHECK_PAGED_COMMON_METAL_H

namespace pagecheck {

constant constexpr int WARP_LANES = 32;
constant constexpr float LOG2_E = 1.4426950408889634f;
constant constexpr int TABLE_PAGED = 0;
constant constexpr int TABLE_DENSE_WITH_LENS = 1;
constant constexpr int TABLE_DENSE_FULL = 2;

// The softmax scale: the float32 bit pattern of its magnitude in the template
// argument SCALE_BITS and its sign in SCALE_NEGATIVE (see scale_of in
// paged_common.cuh).
inline float scale_of(int magnitude_bits, bool negative) {
  const float magnitude = as_type<float>(magnitude_bits);
  return negative ? -magnitude : magnitude;
}

inline constexpr int ceil_div(int a, int b) {
  return (a + b - 1) / b;
}

inline constexpr int next_pow2(int x) {
  int p = 1;
  while (p < x) {
    p *= 2;
  }
  return p;
}

// ---- Simdgroup reductions (a simdgroup is the CUDA warp) ----------------------

template <int GROUP>
inline float group_sum(float x) {
  for (ushort offset = GROUP / 2; offset > 0; offset /= 2) {
    x += simd_shuffle_xor(x, offset);
  }
  return x;
}

template <int GROUP>
inline float group_max(float x) {
  for (ushort offset = GROUP / 2; offset > 0; offset /= 2) {
    x = metal::max(x, simd_shuffle_xor(x, offset));
  }
  return x;
}

inline float usable_max(float running_max) {
  return running_max == -INFINITY ? 0.0f : running_max;
}

// ---- Problem geometry ----------------------------------------------------------

struct PagedGeometry {
  int batch;
  int num_q_heads;
  int num_queries;
  int head_dim;
  int num_pages;
  int num_kv_heads;
  int page_size;
  int max_pages;
  int group;
  int rows;
  int table;
};

inline PagedGeometry make_geometry(
    const constant int* query_shape,
    const constant int* key_pages_shape,
    const constant int* block_table_shape,
    int table) {
  PagedGeometry g;
  g.table = table;
  g.batch = query_shape[0];
  g.num_q_heads = query_shape[1];
  g.num_queries = query_shape[2];
  g.head_dim = query_shape[3];
  g.num_pages = key_pages_shape[0];
  g.num_kv_heads = key_pages_shape[1];
  g.page_size = key_pages_shape[2];
  g.max_pages = block_table_shape[1];
  g.group = g.num_q_heads / g.num_kv_heads;
  g.rows = g.group * g.num_queries;
  return g;
}

template <typename LensPtr>
inline int request_context(thread const PagedGeometry& g, LensPtr context_lens, int request_idx) {
  return g.table == TABLE_DENSE_FULL ? g.page_size : int(context_lens[request_idx]);
}

struct QueryRow {
  bool valid;
  int q_head_idx;
  int query_idx;
  long offset;
  int key_limit;
};

inline QueryRow query_row(
    thread const PagedGeometry& g,
    int request_idx,
    int kv_head_idx,
    int row_idx,
    int context_len,
    bool causal) {
  QueryRow r;
  r.valid = row_idx < g.rows;
  const int row = r.valid ? row_idx : 0;
  r.query_idx = row / g.group;
  r.q_head_idx = kv_head_idx * g.group + row % g.group;
  r.offset = ((long(request_idx) * g.num_q_heads + r.q_head_idx) * g.num_queries + r.query_idx) * g.head_dim;
  r.key_limit = causal ? r.query_idx + context_len - g.num_queries : context_len - 1;
  if (!r.valid) {
    r.key_limit = -1;
  }
  return r;
}

// ---- Page tiles ---------------------------------------------------------------

struct PageTile {
  int page_idx;
  int slot_begin;
  int pos_begin;
  int count;
};

inline PageTile page_tile(int tile_idx, int tile_tokens, int tiles_per_page, int page_size, int pos_end) {
  PageTile t;
  t.page_idx = tile_idx / tiles_per_page;
  t.slot_begin = (tile_idx % tiles_per_page) * tile_tokens;
  t.pos_begin = t.page_idx * page_size + t.slot_begin;
  t.count = metal::min(metal::min(tile_tokens, page_size - t.slot_begin), pos_end - t.pos_begin);
  return t;
}

inline int count_tiles(int pos_end, int page_size, int tile_tokens, int tiles_per_page) {
  if (pos_end <= 0) {
    return 0;
  }
  const int last_page = (pos_end - 1) / page_size;
  return last_page * tiles_per_page + ceil_div(pos_end - last_page * page_size, tile_tokens);
}

template <typename TablePtr>
inline int tile_page_id(
    thread const PagedGeometry& g,
    TablePtr block_table,
    int request_idx,
    thread const PageTile& tile) {
  const int page_id = g.table == TABLE_PAGED
      ? int(block_table[long(request_idx) * g.max_pages + tile.page_idx])
      : request_idx;
  return page_id >= 0 && page_id < g.num_pages ? page_id : -1;
}

inline long page_offset(thread const PagedGeometry& g, int page_id, int kv_head_idx) {
  return (long(page_id) * g.num_kv_heads + kv_head_idx) * long(g.page_size) * g.head_dim;
}

} // namespace pagecheck

#endif // PAGECHECK_PAGED_COMMON_METAL_H
