// Shared device helpers for the paged-attention kernels.
//
// Compiled by NVRTC as the `header` of every kernel (MLX's fast::cuda_kernel
// puts it after its own prelude, which already includes cuda_bf16.h,
// cuda_fp16.h and cuda/std/limits). Everything lives in namespace pagecheck so
// it cannot collide with MLX's names; MLX's prelude defines the macros `inf`
// and WARP_SIZE, so neither name is used as an identifier here.
//
// Softmax runs in base 2: queries are multiplied by scale * log2(e) once, so
// every exponential is an exp2f and every running maximum is in log2 units.
#ifndef PAGECHECK_PAGED_COMMON_CUH
#define PAGECHECK_PAGED_COMMON_CUH

namespace pagecheck {

constexpr int WARP_LANES = 32;
constexpr unsigned ALL_LANES = 0xffffffffu;
constexpr float LOG2_E = 1.4426950408889634f;
constexpr float NEG_INF = -cuda::std::numeric_limits<float>::infinity();

// The softmax scale reaches every kernel as two template arguments, so it is
// a constant of the compiled code: SCALE_BITS, the float32 bit pattern of its
// magnitude, and SCALE_NEGATIVE, its sign. (MLX names a kernel variant after
// its template arguments, and a minus sign in that name does not compile; an
// input array would be a scalar the host has just written, which the GPU then
// reads from host-coherent memory in front of every launch.)
__device__ __forceinline__ float scale_of(int magnitude_bits, bool negative) {
  const float magnitude = __int_as_float(magnitude_bits);
  return negative ? -magnitude : magnitude;
}

__host__ __device__ constexpr int ceil_div(int a, int b) {
  return (a + b - 1) / b;
}

__host__ __device__ constexpr int next_pow2(int x) {
  int p = 1;
  while (p < x) {
    p *= 2;
  }
  return p;
}

// ---- Storage dtype <-> float32 ---------------------------------------------

__device__ __forceinline__ float to_float(float x) {
  return x;
}
__device__ __forceinline__ float to_float(__half x) {
  return __half2float(x);
}
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// Widen one 32-bit word holding two 16-bit values (low half first).
__device__ __forceinline__ void widen_pair(
    unsigned word, __nv_bfloat16, float& lo, float& hi) {
  lo = __uint_as_float(word << 16);
  hi = __uint_as_float(word & 0xffff0000u);
}
__device__ __forceinline__ void widen_pair(
    unsigned word, __half, float& lo, float& hi) {
  __half2 pair = *reinterpret_cast<__half2*>(&word);
  float2 wide = __half22float2(pair);
  lo = wide.x;
  hi = wide.y;
}

// Widen the 16 bytes at `src` (16-byte aligned, shared or global) into
// 16 / sizeof(T) floats.
template <typename T>
__device__ __forceinline__ void widen16(const T* src, float* out) {
  const uint4 raw = *reinterpret_cast<const uint4*>(src);
  if constexpr (sizeof(T) == 4) {
    out[0] = __uint_as_float(raw.x);
    out[1] = __uint_as_float(raw.y);
    out[2] = __uint_as_float(raw.z);
    out[3] = __uint_as_float(raw.w);
  } else {
    widen_pair(raw.x, T{}, out[0], out[1]);
    widen_pair(raw.y, T{}, out[2], out[3]);
    widen_pair(raw.z, T{}, out[4], out[5]);
    widen_pair(raw.w, T{}, out[6], out[7]);
  }
}

// ---- Asynchronous global -> shared copies (sm_80+) ---------------------------

// Copy 16 bytes; when `fill` is false nothing is read and the 16 bytes are
// zeroed, so unmapped or past-the-context slots never reach shared memory.
// L2::128B hints L2 to bring in the surrounding 128 bytes with the requested
// 16, so DRAM sees line-sized reads instead of 32-byte sector misses: the
// copies stream whole K/V rows, so the rest of the line is wanted next anyway.
// The hint lifted the tensor-core decode walk from 3.95 to 4.05 TB/s at
// B 64 x context 4096 and from 4.12 to 4.24 at 64 x 16384 on the H200
// (ext/kernels/NOTES.md).
__device__ __forceinline__ void copy_async16(
    void* shared_dst, const void* global_src, bool fill) {
  const unsigned dst =
      static_cast<unsigned>(__cvta_generic_to_shared(shared_dst));
  const int src_bytes = fill ? 16 : 0;
  asm volatile(
      "cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst),
      "l"(global_src),
      "r"(src_bytes)
      : "memory");
}

__device__ __forceinline__ void commit_async() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Wait until at most `PENDING` committed groups of this thread are in flight.
template <int PENDING>
__device__ __forceinline__ void wait_async() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory");
}

// Wait until every cp.async of this thread has landed, committed or not.
__device__ __forceinline__ void wait_all_async() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

__device__ __forceinline__ bool is_aligned16(const void* p) {
  return (reinterpret_cast<unsigned long long>(p) & 15ull) == 0;
}

// Dynamic shared memory the launch actually provided, for the guard below.
__device__ __forceinline__ unsigned dynamic_shared_bytes() {
  unsigned bytes;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
  return bytes;
}

// A launch with less dynamic shared memory than the kernel's layout needs
// would corrupt memory silently; stop it loudly instead.
__device__ __forceinline__ void require_shared_bytes(unsigned needed) {
  if (dynamic_shared_bytes() < needed) {
    if (threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0) {
      printf(
          "pagecheck: kernel launched with %u bytes of shared memory, needs %u\n",
          dynamic_shared_bytes(),
          needed);
    }
    __trap();
  }
}

// ---- Warp reductions ---------------------------------------------------------

// Sum over aligned groups of GROUP consecutive lanes; every lane of a group
// ends with the group's total.
template <int GROUP>
__device__ __forceinline__ float group_sum(float x) {
#pragma unroll
  for (int offset = GROUP / 2; offset > 0; offset /= 2) {
    x += __shfl_xor_sync(ALL_LANES, x, offset);
  }
  return x;
}

template <int GROUP>
__device__ __forceinline__ float group_max(float x) {
#pragma unroll
  for (int offset = GROUP / 2; offset > 0; offset /= 2) {
    x = fmaxf(x, __shfl_xor_sync(ALL_LANES, x, offset));
  }
  return x;
}

// A running maximum that is still -inf means no key was visible yet; using 0
// in its place keeps exp2f(-inf - max) at 0 instead of NaN.
__device__ __forceinline__ float usable_max(float running_max) {
  return running_max == NEG_INF ? 0.0f : running_max;
}

// ---- Problem geometry ----------------------------------------------------------

// Where a request's pages and context length come from (template argument
// TABLE of every attention kernel): the block table and context_lens, or the
// dense view of a [B, H_kv, S, D] K/V as one page of S slots per request
// (page id = request index; block_table is a placeholder), with context_lens
// given or every context S.
constexpr int TABLE_PAGED = 0;
constexpr int TABLE_DENSE_WITH_LENS = 1;
constexpr int TABLE_DENSE_FULL = 2;

// Sizes read from the shapes MLX passes next to each input.
struct PagedGeometry {
  int batch;
  int num_q_heads;
  int num_queries;
  int head_dim;
  int num_pages;
  int num_kv_heads;
  int page_size;
  int max_pages;
  int group; // query heads per kv head
  int rows; // query rows per (request, kv head): group * num_queries
  int table; // TABLE_PAGED, TABLE_DENSE_WITH_LENS or TABLE_DENSE_FULL
};

__device__ __forceinline__ PagedGeometry make_geometry(
    const int* query_shape,
    const int* key_pages_shape,
    const int* block_table_shape,
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

// The block of query rows a thread block owns: blocks are numbered
// request-major, then kv head, then block of `rows_per_block` of that kv
// head's rows.
struct RowBlock {
  int request_idx;
  int kv_head_idx;
  int row_begin;
};

__device__ __forceinline__ RowBlock row_block(const PagedGeometry& g, int block_idx, int rows_per_block) {
  const int blocks_per_head = ceil_div(g.rows, rows_per_block);
  RowBlock b;
  b.request_idx = block_idx / (g.num_kv_heads * blocks_per_head);
  b.kv_head_idx = (block_idx / blocks_per_head) % g.num_kv_heads;
  b.row_begin = (block_idx % blocks_per_head) * rows_per_block;
  return b;
}

__device__ __forceinline__ int request_context(
    const PagedGeometry& g,
    const int32_t* context_lens,
    int request_idx) {
  return g.table == TABLE_DENSE_FULL ? g.page_size : context_lens[request_idx];
}

// Rows of one (request, kv head) are numbered position-major:
// row = query_idx * group + head_in_group. Consecutive rows then share a
// query position range, which keeps causal limits of a row tile tight.
struct QueryRow {
  bool valid;
  int q_head_idx;
  int query_idx;
  long long offset; // element offset of the row in query / out
  int key_limit; // last visible key position (causal), or context_len - 1
};

__device__ __forceinline__ QueryRow query_row(
    const PagedGeometry& g,
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
  r.offset = ((static_cast<long long>(request_idx) * g.num_q_heads +
               r.q_head_idx) *
                  g.num_queries +
              r.query_idx) *
      g.head_dim;
  r.key_limit = causal ? r.query_idx + context_len - g.num_queries
                       : context_len - 1;
  if (!r.valid) {
    r.key_limit = -1;
  }
  return r;
}

// Where decode block x sits (paged_decode, paged_decode_split and their walks):
// geometry, request, kv head, first row, context.
struct DecodeBlock {
  PagedGeometry geo;
  int request_idx;
  int kv_head_idx;
  int row_begin;
  int context_len;

  // Row r of the block (0 <= r < rows per block).
  __device__ __forceinline__ QueryRow row(int r, bool causal) const {
    return query_row(geo, request_idx, kv_head_idx, row_begin + r, context_len, causal);
  }

  // How many of the block's rows exist: rows 0 .. live_rows - 1 are valid
  // and the rest are not (row r is valid iff row_begin + r < geo.rows).
  __device__ __forceinline__ int live_rows(int rows_per_block) const {
    return min(rows_per_block, geo.rows - row_begin);
  }
};

__device__ __forceinline__ DecodeBlock decode_block(
    const PagedGeometry& geo,
    const int32_t* context_lens,
    int rows_per_block) {
  const RowBlock rows = row_block(geo, blockIdx.x, rows_per_block);
  return DecodeBlock{geo, rows.request_idx, rows.kv_head_idx, rows.row_begin,
                     request_context(geo, context_lens, rows.request_idx)};
}

// The end of the key positions the query rows [row_first, row_first +
// row_tile) need: the context, cut after the causal limit of the last row
// (rows are position-major, so the last row sees the most).
__device__ __forceinline__ int row_tile_key_end(
    const PagedGeometry& g,
    int request_idx,
    int kv_head_idx,
    int row_first,
    int row_tile,
    int context_len,
    bool causal) {
  const int last_row = min(row_first + row_tile, g.rows) - 1;
  const QueryRow row = query_row(g, request_idx, kv_head_idx, last_row, context_len, causal);
  return min(context_len, row.key_limit + 1);
}

// ---- Page tiles ---------------------------------------------------------------

// A tile is up to TILE consecutive positions inside ONE page, so a tile needs
// exactly one block-table entry. Tiles are numbered page by page from page 0;
// a page of page_size slots holds ceil(page_size / TILE) tiles, the last one
// short when TILE does not divide page_size.
struct PageTile {
  int page_idx; // column of the block table
  int slot_begin; // first slot inside the page
  int pos_begin; // logical position of the first slot
  int count; // positions in the tile (<= 0: past the range)
};

// Division of non-negative ints below 2^31 by a divisor fixed at run time,
// by a multiply-high, an add and a shift (round-up multiplier, shift =
// ceil(log2 divisor)), instead of the ~20-instruction integer division a
// tile's page lookup would otherwise pay on every tile. Built once per block.
struct TileDivisor {
  int divisor;
  unsigned multiplier;
  unsigned shift;

  __device__ explicit TileDivisor(int d) : divisor(d), multiplier(0), shift(0) {
    while ((1u << shift) < static_cast<unsigned>(d)) {
      ++shift;
    }
    // 2^32 (2^shift - d) / d + 1 < 2^32, since 2^shift < 2 d.
    multiplier = static_cast<unsigned>(
        ((static_cast<unsigned long long>((1u << shift) - static_cast<unsigned>(d))) << 32) /
            static_cast<unsigned>(d) + 1);
  }

  // n / divisor for 0 <= n < 2^31 (hi < n there, so hi + n fits 32 bits).
  __device__ __forceinline__ int div(int n) const {
    const unsigned hi = __umulhi(static_cast<unsigned>(n), multiplier);
    return static_cast<int>((hi + static_cast<unsigned>(n)) >> shift);
  }
};

__device__ __forceinline__ PageTile page_tile(
    int tile_idx,
    int tile_tokens,
    const TileDivisor& tiles_per_page,
    int page_size,
    int pos_end) {
  PageTile t;
  t.page_idx = tiles_per_page.div(tile_idx);
  t.slot_begin = (tile_idx - t.page_idx * tiles_per_page.divisor) * tile_tokens;
  t.pos_begin = t.page_idx * page_size + t.slot_begin;
  t.count = min(min(tile_tokens, page_size - t.slot_begin), pos_end - t.pos_begin);
  return t;
}

// Key tile `tile_idx` by position alone: positions [tile_idx * tile_tokens, +tile_tokens) cut at
// pos_end, whatever pages they fall in (page_idx and slot_begin say where the first one sits).
__device__ __forceinline__ PageTile position_tile(int tile_idx, int tile_tokens, int page_size, int pos_end) {
  PageTile t;
  t.pos_begin = tile_idx * tile_tokens;
  t.page_idx = t.pos_begin / page_size;
  t.slot_begin = t.pos_begin - t.page_idx * page_size;
  t.count = min(tile_tokens, pos_end - t.pos_begin);
  return t;
}

// Tiles needed to cover positions [0, pos_end).
__device__ __forceinline__ int count_tiles(
    int pos_end,
    int page_size,
    int tile_tokens,
    int tiles_per_page) {
  if (pos_end <= 0) {
    return 0;
  }
  const int last_page = (pos_end - 1) / page_size;
  return last_page * tiles_per_page +
      ceil_div(pos_end - last_page * page_size, tile_tokens);
}

// The page id of a tile: its block-table entry (table_row is the request's
// row), or the request index in the dense view; -1 when it names no page of
// the pool (the op validates tables; this keeps a bad one from reading out of
// bounds).
__device__ __forceinline__ int page_id_at(
    const PagedGeometry& g,
    const int32_t* table_row,
    int request_idx,
    int page_idx) {
  const int page_id = g.table == TABLE_PAGED ? table_row[page_idx] : request_idx;
  return page_id >= 0 && page_id < g.num_pages ? page_id : -1;
}

__device__ __forceinline__ int tile_page_id(
    const PagedGeometry& g,
    const int32_t* table_row,
    int request_idx,
    const PageTile& tile) {
  return page_id_at(g, table_row, request_idx, tile.page_idx);
}

// Element offset of (page, kv head, slot 0) in a [P, H_kv, page_size, D] pool:
// 64-bit, since page ids near 2^20 times the page stride pass 2^31.
__device__ __forceinline__ long long page_offset(
    const PagedGeometry& g,
    int page_id,
    int kv_head_idx) {
  return (static_cast<long long>(page_id) * g.num_kv_heads + kv_head_idx) *
      static_cast<long long>(g.page_size) * g.head_dim;
}

} // namespace pagecheck

#endif // PAGECHECK_PAGED_COMMON_CUH
