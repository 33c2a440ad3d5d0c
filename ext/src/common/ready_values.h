// Reads small integer metadata (block tables, context lengths) at op time
// when it is already computed, so bad values raise at the call (ValueError)
// instead of when the graph is evaluated. Lazy inputs (not yet scheduled, or
// traced under mx.compile) return nullptr and are checked when the task runs.
#pragma once

#include <cstdint>

#include "mlx/array.h"

namespace pagecheck {

inline const int32_t* ready_int32_values(mlx::core::array& array) {
  if (array.status() == mlx::core::array::Status::unscheduled || !array.flags().row_contiguous) {
    return nullptr;
  }
  array.wait();
  return array.data<int32_t>();
}

} // namespace pagecheck
