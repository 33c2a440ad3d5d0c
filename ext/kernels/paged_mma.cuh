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

} // namespace pagecheck

#endif // PAGECHECK_PAGED_MMA_CUH
