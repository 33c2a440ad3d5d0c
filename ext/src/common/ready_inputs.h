// Inputs that are already computed, used at op time.
//
// Reads small integer metadata (block tables, context lengths) at op time
// when it is already computed, so bad values raise at the call (ValueError)
// instead of when the graph is evaluated. Lazy inputs (not yet scheduled, or
// traced under mx.compile) return nullptr and are checked when the task runs.
// So do all inputs when MLX has a GPU back-end: on the CUDA back-end a
// computed array may live in device memory, which the host must not
// dereference (seen on the H200: a segfault at the first such read, on a CPU
// stream too). There the GPU kernels treat out-of-range page ids as absent,
// the CPU schedules validate when their task runs, and impl validates on the
// host (through a proper copy) before calling the op.
#pragma once

#include <cstdint>

#include "mlx/array.h"
#include "mlx/device.h"
#include "mlx/ops.h"
#include "mlx/utils.h"

namespace pagecheck {

inline bool host_reads_metadata_at_call() {
  static const bool cpu_only = !mlx::core::is_available(mlx::core::Device::gpu);
  return cpu_only;
}

inline const int32_t* ready_int32_values(mlx::core::array& array) {
  if (!host_reads_metadata_at_call() || array.status() == mlx::core::array::Status::unscheduled ||
      !array.flags().row_contiguous) {
    return nullptr;
  }
  array.wait();
  return array.data<int32_t>();
}

// The array itself when it is already computed and row contiguous, else
// mx::contiguous of it. Skipping the extra graph node matters for short
// decode calls, where per-node scheduling is a visible part of the time.
inline mlx::core::array row_contiguous_input(const mlx::core::array& array, mlx::core::StreamOrDevice stream) {
  if (array.status() != mlx::core::array::Status::unscheduled && array.flags().row_contiguous) {
    return array;
  }
  return mlx::core::contiguous(array, false, stream);
}

} // namespace pagecheck
