// Metadata values read on the host at op time, and inputs that are already computed.
//
// Small integer metadata (block tables, context lengths, token ids) of a call
// on the CPU stream is read at the call, so bad values raise ValueError there,
// before any graph node exists; metadata not yet computed is evaluated first
// (a synchronisation while the graph is built, paid only by lazily made
// metadata: impl hands over computed arrays). The CPU task checks the values
// again for what cannot be read at the call (tracers under mx.compile or
// mx.vmap) and raises RuntimeError at evaluation. (On the H200 a bad value
// once crashed the process wherever it was found: the message was formatted
// through an ostringstream, which segfaulted in that build; common/error_text.h.)
//
// With a GPU back-end the values are never read from the caller's array: on
// CUDA a computed array may live in device memory, which the host must not
// dereference (seen on the H200: a segfault at the first such read). They are
// read from a copy that a CPU-stream task wrote. Calls on the GPU stream read
// nothing at the call: the GPU kernels treat out-of-range page ids as absent,
// and impl validates on the host (through a proper copy) before calling the op.
#pragma once

#include <cstdint>
#include <optional>

#include "mlx/array.h"
#include "mlx/device.h"
#include "mlx/ops.h"
#include "mlx/utils.h"

namespace pagecheck {

// CPU-only builds: every computed array lives in host memory.
inline bool host_reads_caller_arrays() {
  static const bool cpu_only = !mlx::core::is_available(mlx::core::Device::gpu);
  return cpu_only;
}

// An array whose int32 values the host may read now, equal to `array`, or
// nullopt where the values are checked when the task runs (GPU-stream calls,
// tracers). Keep the returned array alive while reading its data.
inline std::optional<mlx::core::array> host_int32_values(const mlx::core::array& array, mlx::core::StreamOrDevice stream) {
  namespace mx = mlx::core;
  const mx::Stream resolved = mx::to_stream(stream);
  if (resolved.device == mx::Device::gpu || array.is_tracer()) {
    return std::nullopt;
  }
  mx::array host = array;
  if (!host_reads_caller_arrays()) {
    // A fresh buffer written on the host by a CPU task (an add, because a CPU
    // copy may share the source's buffer instead of writing one).
    host = mx::add(array, mx::array(0, mx::int32), resolved);
  } else if (array.status() == mx::array::Status::unscheduled || !array.flags().row_contiguous) {
    host = mx::contiguous(array, false, resolved);
  }
  host.eval();
  return host;
}

// An input for a primitive that needs it row contiguous. On the CPU stream:
// the array itself when it is already computed and row contiguous, else
// mx::contiguous of it. On the GPU stream: the array itself, always; the
// kernel launch (MLX's CustomKernel, made with ensure_row_contiguous) copies
// an input that is not row contiguous when it runs, so a graph node here
// would only repeat that check. Skipping extra graph nodes matters for short
// decode calls, where per-node submission is a visible part of the time.
inline mlx::core::array row_contiguous_input(const mlx::core::array& array, mlx::core::StreamOrDevice stream) {
  if (mlx::core::to_stream(stream).device == mlx::core::Device::gpu) {
    return array;
  }
  if (array.status() != mlx::core::array::Status::unscheduled && array.flags().row_contiguous) {
    return array;
  }
  return mlx::core::contiguous(array, false, stream);
}

} // namespace pagecheck
