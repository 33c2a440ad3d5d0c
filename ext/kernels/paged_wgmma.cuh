// Warpgroup tensor-core helpers (sm_90a: wgmma.mma_async) for
// paged_prefill_wgmma.
//
// A warpgroup is 4 consecutive warps (128 threads). wgmma m64nNk16 multiplies
// A (64 x 16, from registers) by B (16 x N, from shared memory through a
// matrix descriptor) into D (64 x N, float32 registers). Warp w of the group
// holds rows 16w..16w+15 of A and D, in the fragment layouts of mma.sync
// m16n8k16 (paged_mma.cuh): A as 4 words per k16 step, D as 4 floats per n8
// block, d[n8][0..1] for row `group`, d[n8][2..3] for row `group + 8`.
//
// Shared K/V tiles are stored in the 128-byte swizzle layout both operands
// take (Sw128Rows): a tile of ROWS rows of HEAD_DIM elements is cut into
// column blocks of 64 elements (128 bytes); block b holds every row's
// elements [64 b, 64 b + 64) as one 128-byte line per row, rows in order,
// and the 16-byte chunk c of row r sits at chunk position c ^ (r % 8). Each
// column block starts on a 1024-byte boundary.
// - K (B of S = Q K^T, "K-major": the reduction dim, head dim, is contiguous):
//   the descriptor of k16 step s starts at column block s / 4, byte 32 (s % 4)
//   of its first line; 8-row groups lie 1024 bytes apart (stride offset).
// - V (B of O = P V, transposed, "MN-major": the output dim, head dim, is
//   contiguous): the descriptor of k16 step s (keys 16 s..16 s + 15) starts at
//   line 16 s of column block 0; 8-key groups lie 1024 bytes apart (stride
//   offset) and column blocks ROWS * 128 bytes apart (leading offset).
#ifndef PAGECHECK_PAGED_WGMMA_CUH
#define PAGECHECK_PAGED_WGMMA_CUH

namespace pagecheck {

// Threads of a warpgroup: 4 consecutive warps.
constexpr int WARPGROUP_THREADS = 128;

template <int ROWS>
struct Sw128Rows {
  static_assert(ROWS % 8 == 0, "whole 8-row swizzle groups");
  // Element offset of 16-byte chunk `chunk` (8 elements) of row `row`.
  __device__ __forceinline__ static int at(int row, int chunk) {
    return (chunk / 8) * ROWS * 64 + row * 64 + ((chunk % 8) ^ (row % 8)) * 8;
  }
};

// Shared-memory matrix descriptor, 128-byte swizzle.
__device__ __forceinline__ unsigned long long wgmma_descriptor(
    const void* start, unsigned leading_bytes, unsigned stride_bytes) {
  const unsigned address = shared_address(start);
  unsigned long long desc = 0;
  desc |= static_cast<unsigned long long>((address & 0x3ffff) >> 4);
  desc |= static_cast<unsigned long long>((leading_bytes >> 4) & 0x3fff) << 16;
  desc |= static_cast<unsigned long long>((stride_bytes >> 4) & 0x3fff) << 32;
  desc |= 1ull << 62;
  return desc;
}

// The warp's 16 query rows (rows[0]: row `group`, rows[1]: row `group + 8`
// of warp `warp_in_group`'s slice) into its warpgroup's 64-row tile in the
// swizzled layout (Sw128Rows<64>), the A operand of S = Q K^T: the 4 lanes of
// a row pair copy every fourth 16-byte chunk; rows past the kv head's rows
// are zeros. The caller fences (fence_async_shared) and synchronises before
// the first wgmma reads them.
template <typename T, int HEAD_DIM>
__device__ __forceinline__ void store_query_tile(
    T* q_tile,
    const T* query,
    const QueryRow (&rows)[2],
    int pair_idx,
    int warp_in_group) {
  constexpr int CHUNKS = HEAD_DIM / 8;
  const bool aligned = is_aligned16(query);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const QueryRow& row = rows[half];
    const int tile_row = warp_in_group * 16 + (threadIdx.x % 32) / 4 + 8 * half;
#pragma unroll
    for (int chunk = pair_idx; chunk < CHUNKS; chunk += 4) {
      T* dst = q_tile + Sw128Rows<64>::at(tile_row, chunk);
      if (aligned) {
        *reinterpret_cast<uint4*>(dst) =
            row.valid ? *reinterpret_cast<const uint4*>(query + row.offset + chunk * 8) : make_uint4(0u, 0u, 0u, 0u);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          dst[e] = row.valid ? query[row.offset + chunk * 8 + e] : from_float<T>(0.0f);
        }
      }
    }
  }
}

// The descriptor of the matrix `bytes` further on in shared memory (the start
// address field holds address / 16 and cannot carry: shared memory ends
// below 2^18 bytes).
__device__ __forceinline__ unsigned long long wgmma_descriptor_at(unsigned long long desc, unsigned bytes) {
  return desc + (bytes >> 4);
}

// Orders this thread's register and shared accesses before the wgmma that
// follows (needed before the first wgmma and whenever its registers changed).
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int PENDING>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(PENDING) : "memory");
}
// Makes this thread's shared-memory writes (cp.async included, once waited
// for) visible to the async proxy that wgmma reads shared memory through.
__device__ __forceinline__ void fence_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Keeps the compiler from moving accesses to an accumulator across a wait.
template <int N>
__device__ __forceinline__ void hold_registers(float (&d)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      asm volatile("" : "+f"(d[i][j])::"memory");
    }
  }
}

// Turns on the tensor cores between the warpgroups of a block: warpgroup g
// waits at named barrier 1 + g (turn_wait) until the warpgroup before it hands
// the turn over there (turn_pass); each turn takes both warpgroups'
// threads. Barrier 0 stays __syncthreads'.
__device__ __forceinline__ void turn_wait(int barrier_id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(barrier_id), "n"(2 * WARPGROUP_THREADS) : "memory");
}
__device__ __forceinline__ void turn_pass(int barrier_id) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(barrier_id), "n"(2 * WARPGROUP_THREADS) : "memory");
}

// Register reallocation between the warpgroups of a block (sm_90a): every
// thread of a warpgroup runs the same call. A producer warpgroup gives up
// registers (release_registers) that the consumer warpgroups then take
// (claim_registers); N is a multiple of 8 in [24, 256].
template <int N>
__device__ __forceinline__ void release_registers() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg count");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void claim_registers() {
  static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg count");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

// How far (base 2, scaled) a tile's max may pass the running max before the
// running max moves: weights up to 2^8 lose nothing in bfloat16 or float16 and
// sum safely in float32.
constexpr float RESCALE_SLACK = 8.0f;

// One online-softmax step on the raw score fragments of a warp's 16 rows (as
// fragment_softmax in paged_mma.cuh, at fewer instructions per score): the
// tile's extreme raw score is found first (the maximum when the scale is
// positive, POSITIVE, else the minimum), so the scale and the running maximum
// meet every score in one fused multiply-add before the exponential. With
// MASK the keys past the tile or past each row's causal limit are cut; a tile
// that every row sees whole skips those compares. The extreme and the sum
// run over PARTS interleaved partials each, so that no chain of dependent
// instructions is longer than S_TILES * 2 / PARTS; the two rows' steps are
// interleaved the same way. run_max is kept in scaled base-2 units, shared by
// the 4 lanes of a group; run_sum per lane. The running max moves only where a
// tile's passes it by more than RESCALE_SLACK. The output accumulators are not
// touched (a product into them may still be running): `rescale` gets each
// row's factor for them (rescale_rows, once that product has completed).
template <bool MASK, bool POSITIVE, int S_TILES>
__device__ __forceinline__ void warpgroup_softmax(
    float (&score)[S_TILES][4],
    float (&rescale)[2],
    float (&run_max)[2],
    float (&run_sum)[2],
    const WarpRows& warp,
    const PageTile& tile,
    float score_scale) {
  constexpr float FAR = POSITIVE ? NEG_INF : -NEG_INF;
  constexpr int PARTS = 4;
  float extreme[2][PARTS];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
#pragma unroll
    for (int part = 0; part < PARTS; ++part) {
      extreme[half][part] = FAR;
    }
  }
#pragma unroll
  for (int nt = 0; nt < S_TILES; ++nt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
#pragma unroll
      for (int col = 0; col < 2; ++col) {
        float value = score[nt][2 * half + col];
        if constexpr (MASK) {
          const int token = nt * 8 + 2 * warp.pair_idx + col;
          const bool visible = token < tile.count && tile.pos_begin + token <= warp.rows[half].key_limit;
          value = visible ? value : FAR;
          score[nt][2 * half + col] = value;
        }
        float& part = extreme[half][(2 * nt + col) % PARTS];
        part = POSITIVE ? fmaxf(part, value) : fminf(part, value);
      }
    }
  }
  float base[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float e = extreme[half][0];
#pragma unroll
    for (int part = 1; part < PARTS; ++part) {
      e = POSITIVE ? fmaxf(e, extreme[half][part]) : fminf(e, extreme[half][part]);
    }
    e = POSITIVE ? group_max<4>(e) : -group_max<4>(-e);
    // The running max moves only when the tile's exceeds it by more than
    // RESCALE_SLACK, so O and the sum are rarely rescaled after the first tile;
    // until then the weights stay below 2^RESCALE_SLACK.
    const float tile_max = e * score_scale;
    const float new_max = tile_max > run_max[half] + RESCALE_SLACK ? tile_max : run_max[half];
    base[half] = next_running_max(run_max, run_sum, half, new_max, [](float x) { return exp2_ftz(x); },
                                  rescale[half]);
  }
  float sums[2][PARTS] = {};
#pragma unroll
  for (int nt = 0; nt < S_TILES; ++nt) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
#pragma unroll
      for (int col = 0; col < 2; ++col) {
        float& value = score[nt][2 * half + col];
        // A cut key holds FAR and weighs 0 (its product with a zero scale would be NaN).
        const float weight = exp2_ftz(fmaf(value, score_scale, -base[half]));
        value = MASK && value == FAR ? 0.0f : weight;
        sums[half][(2 * nt + col) % PARTS] += value;
      }
    }
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    float total = 0.0f;
#pragma unroll
    for (int part = 0; part < PARTS; ++part) {
      total += sums[half][part];
    }
    run_sum[half] += total;
  }
}

// d (+)= a * B for one k16 step of a 64 x N tile; `accumulate` 0 overwrites d.
// TRANS_B 0: B's descriptor is K-major; 1: MN-major. One wrapper per N and
// input type (PAGECHECK_WGMMA_RS); the register lists spell out wgmma's
// operands: D's N / 2 floats, A's 4 words, B's descriptor, then `accumulate`
// (as the predicate p) and TRANS_B.
#define PAGECHECK_WGMMA_N64_PREDICATE "setp.ne.b32 p, %37, 0;\n"
// D's register list, operands %0.. of every wrapper below.
#define PAGECHECK_WGMMA_N64_D \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, " \
    "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define PAGECHECK_WGMMA_N128_D \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, " \
    "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, " \
    "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, " \
    "%59, %60, %61, %62, %63}"
#define PAGECHECK_WGMMA_N64_OPERANDS PAGECHECK_WGMMA_N64_D ", {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n"
#define PAGECHECK_WGMMA_N64_OUTPUTS(d) \
    "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), \
    "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), \
    "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), \
    "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), \
    "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), \
    "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
    "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), \
    "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
#define PAGECHECK_WGMMA_N128_PREDICATE "setp.ne.b32 p, %69, 0;\n"
#define PAGECHECK_WGMMA_N128_OPERANDS PAGECHECK_WGMMA_N128_D ", {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n"
#define PAGECHECK_WGMMA_N128_OUTPUTS(d) \
    PAGECHECK_WGMMA_N64_OUTPUTS(d), \
    "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), \
    "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), \
    "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), \
    "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), \
    "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), \
    "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), \
    "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), \
    "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
#define PAGECHECK_WGMMA_RS(N, PTX_TYPE, CPP_TYPE)                                                           \
  template <int TRANS_B>                                                                                     \
  __device__ __forceinline__ void wgmma_rs(                                                                  \
      float (&d)[N / 8][4], const unsigned (&a)[4], unsigned long long desc_b, int accumulate, CPP_TYPE) { \
    asm volatile("{\n.reg .pred p;\n" PAGECHECK_WGMMA_N##N##_PREDICATE                                       \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX_TYPE "." PTX_TYPE " "                   \
                 PAGECHECK_WGMMA_N##N##_OPERANDS "}\n"                                                       \
                 : PAGECHECK_WGMMA_N##N##_OUTPUTS(d)                                                         \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate), "n"(TRANS_B));    \
  }
// d (+)= A * B with both operands in shared memory (A K-major, through its
// own descriptor): D's N / 2 floats, A's and B's descriptors, `accumulate`.
#define PAGECHECK_WGMMA_SS_N64_OPERANDS PAGECHECK_WGMMA_N64_D ", %32, %33, p, 1, 1, 0, %35;\n"
#define PAGECHECK_WGMMA_SS_N64_PREDICATE "setp.ne.b32 p, %34, 0;\n"
#define PAGECHECK_WGMMA_SS_N128_OPERANDS PAGECHECK_WGMMA_N128_D ", %64, %65, p, 1, 1, 0, %67;\n"
#define PAGECHECK_WGMMA_SS_N128_PREDICATE "setp.ne.b32 p, %66, 0;\n"
#define PAGECHECK_WGMMA_SS(N, PTX_TYPE, CPP_TYPE)                                                           \
  template <int TRANS_B>                                                                                     \
  __device__ __forceinline__ void wgmma_ss(                                                                  \
      float (&d)[N / 8][4], unsigned long long desc_a, unsigned long long desc_b, int accumulate, CPP_TYPE) { \
    asm volatile("{\n.reg .pred p;\n" PAGECHECK_WGMMA_SS_N##N##_PREDICATE                                    \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX_TYPE "." PTX_TYPE " "                   \
                 PAGECHECK_WGMMA_SS_N##N##_OPERANDS "}\n"                                                    \
                 : PAGECHECK_WGMMA_N##N##_OUTPUTS(d)                                                         \
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate), "n"(TRANS_B));                                  \
  }
PAGECHECK_WGMMA_RS(64, "bf16", __nv_bfloat16)
PAGECHECK_WGMMA_RS(64, "f16", __half)
PAGECHECK_WGMMA_RS(128, "bf16", __nv_bfloat16)
PAGECHECK_WGMMA_RS(128, "f16", __half)
PAGECHECK_WGMMA_SS(64, "bf16", __nv_bfloat16)
PAGECHECK_WGMMA_SS(64, "f16", __half)
PAGECHECK_WGMMA_SS(128, "bf16", __nv_bfloat16)
PAGECHECK_WGMMA_SS(128, "f16", __half)

} // namespace pagecheck

#endif // PAGECHECK_PAGED_WGMMA_CUH
