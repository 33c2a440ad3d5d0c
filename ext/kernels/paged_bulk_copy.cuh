// Bulk (TMA) row copies into a warp's staging ring, completed on an mbarrier
// (sm_90+: cp.async.bulk and mbarrier transaction counts).
//
// Why: the cp.async ring moves a 16-token tile of K and V as 16 copies of 16
// bytes per lane (512 per warp); a bulk copy moves one 256-byte row per
// instruction, so a tile is 32 instructions per warp and the copy engine,
// not the lanes, generates the addresses. Rows keep the ring's padded stride
// (ldmatrix stays conflict-free), which is why a tile is copied row by row
// rather than as one 4 KB block.
//
// Protocol of one ring stage: lane 0 arrives on the stage's barrier with the
// bytes the copies will bring (expect_tx), lanes 0..TILE-1 copy K rows and
// TILE..2 TILE-1 V rows, or zero-fill rows past the tile or of an unmapped
// page with plain stores; consumers wait on the barrier's phase and then
// __syncwarp (which orders the zero-fill stores). Before a stage is
// refilled, fence.proxy.async orders the generic reads of its previous use
// before the copy engine's writes.
#ifndef PAGECHECK_PAGED_BULK_COPY_CUH
#define PAGECHECK_PAGED_BULK_COPY_CUH

namespace pagecheck {

__device__ __forceinline__ void barrier_init(unsigned long long* barrier, unsigned arrivals) {
  asm volatile(
      "mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(barrier)),
      "r"(arrivals)
      : "memory");
}

// Makes initialised barriers visible to the copy engine (the async proxy).
__device__ __forceinline__ void barrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// A ring's stage barriers, `arrivals` arrivals each, made by the ring's owner
// 0 (lane 0 of a warp's ring, thread 0 of a block's); the caller then
// synchronises the ring's threads before any of them issues or waits.
__device__ __forceinline__ void init_stage_barriers(
    unsigned long long* first, int stages, int owner, unsigned arrivals = 1) {
  if (owner == 0) {
    for (int stage = 0; stage < stages; ++stage) {
      barrier_init(first + stage, arrivals);
    }
    barrier_init_fence();
  }
}

__device__ __forceinline__ void barrier_expect_bytes(unsigned long long* barrier, unsigned bytes) {
  asm volatile(
      "{\n .reg .b64 state;\n mbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}\n" ::"r"(
          shared_address(barrier)),
      "r"(bytes)
      : "memory");
}

// Blocks until the barrier's phase of the given parity has completed.
__device__ __forceinline__ void barrier_wait(unsigned long long* barrier, unsigned parity) {
  unsigned done = 0;
  while (!done) {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(shared_address(barrier)), "r"(parity)
        : "memory");
  }
}

// One arrival on the barrier once every cp.async this thread issued before
// has landed (the arrival counts against the barrier's expected arrivals).
__device__ __forceinline__ void barrier_arrive_after_copies(unsigned long long* barrier) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(shared_address(barrier)) : "memory");
}

// One arrival now, releasing this thread's earlier writes to the waiters.
__device__ __forceinline__ void barrier_arrive(unsigned long long* barrier) {
  asm volatile(
      "{\n .reg .b64 state;\n mbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(shared_address(barrier))
      : "memory");
}

__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

__device__ __forceinline__ void bulk_copy(
    void* shared_dst, const void* global_src, unsigned bytes, unsigned long long* barrier) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          shared_address(shared_dst)),
      "l"(global_src),
      "r"(bytes),
      "r"(shared_address(barrier))
      : "memory");
}

// One tile's K and V rows into a ring stage, as the protocol above: rows
// 0..TILE-1 are K's, TILE..2 TILE-1 V's, and row r goes to the thread with
// `first + k * stride == r` (a warp: lane, 32; a block: thread, block size);
// the thread with first == 0 arrives. Needs 16-byte aligned pools (rows of
// HEAD_DIM * sizeof(T) bytes, a multiple of 16).
template <typename T, int HEAD_DIM, int TILE, typename ROWS>
__device__ __forceinline__ void bulk_copy_tile_rows(
    T* stage_k,
    T* stage_v,
    const T* key_pages,
    const T* value_pages,
    long long base,
    int count,
    bool mapped,
    unsigned long long* barrier,
    int first,
    int stride) {
  constexpr unsigned ROW_BYTES = HEAD_DIM * sizeof(T);
  static_assert(ROW_BYTES % 16 == 0 && (ROWS::STRIDE * sizeof(T)) % 16 == 0, "16-byte rows");
  static_assert(!ROWS::SWIZZLED, "a bulk copy writes a row in order");
  const int live_rows = mapped ? max(0, min(count, TILE)) : 0;
  fence_proxy_async_shared();
  if (first == 0) {
    barrier_expect_bytes(barrier, 2u * static_cast<unsigned>(live_rows) * ROW_BYTES);
  }
  for (int idx = first; idx < 2 * TILE; idx += stride) {
    const bool is_key = idx < TILE;
    const int row = idx % TILE;
    T* dst = (is_key ? stage_k : stage_v) + ROWS::at(row, 0);
    if (row < live_rows) {
      const T* src = (is_key ? key_pages : value_pages) + base + static_cast<long long>(row) * HEAD_DIM;
      bulk_copy(dst, src, ROW_BYTES, barrier);
    } else {
#pragma unroll
      for (int chunk = 0; chunk < static_cast<int>(ROW_BYTES / 16); ++chunk) {
        reinterpret_cast<uint4*>(dst)[chunk] = make_uint4(0u, 0u, 0u, 0u);
      }
    }
  }
}

// A ring's two copy paths behind one call, so every ring picks its path the
// same way: with BULK, bulk row copies where the pools are 16-byte aligned
// (`vector_copy`), else copy_tile_rows (cp.async when aligned, plain copies
// otherwise) with, in a bulk ring, a barrier phase that expects no bytes.
// The calling thread is `first` of the STRIDE threads that fill the stage.
template <bool BULK, typename T, int HEAD_DIM, int TILE, typename ROWS, int STRIDE>
__device__ __forceinline__ void fill_stage(
    T* stage_k,
    T* stage_v,
    const T* key_pages,
    const T* value_pages,
    long long base,
    int count,
    bool mapped,
    bool vector_copy,
    unsigned long long* barrier,
    int first) {
  if constexpr (BULK) {
    if (vector_copy) {
      bulk_copy_tile_rows<T, HEAD_DIM, TILE, ROWS>(
          stage_k, stage_v, key_pages, value_pages, base, count, mapped, barrier, first, STRIDE);
      return;
    }
    if (first == 0) {
      barrier_expect_bytes(barrier, 0);
    }
  }
  copy_tile_rows<T, HEAD_DIM, TILE, ROWS, STRIDE>(
      stage_k, stage_v, key_pages, value_pages, base, count, mapped, vector_copy, first);
}

// Until the stage of the local-th tile has landed for this thread: its
// barrier's phase ((local / STAGES) % 2) completed, or (cp.async) at most
// STAGES - 1 later groups of this thread in flight. The caller then
// synchronises the ring's threads.
template <bool BULK, int STAGES>
__device__ __forceinline__ void wait_stage(unsigned long long* barrier, int local) {
  if constexpr (BULK) {
    barrier_wait(barrier, (local / STAGES) % 2);
  } else {
    wait_async<STAGES - 1>();
  }
}

} // namespace pagecheck

#endif // PAGECHECK_PAGED_BULK_COPY_CUH
