// Outputs that are views of another output's buffer (a primitive's scratch or
// its one written buffer), set during evaluation.
#pragma once

#include <algorithm>
#include <cstdint>

#include "mlx/array.h"

namespace pagecheck {

// Sets `out` (shape and dtype already set) as the row-contiguous view of
// `buffer`'s data starting `offset` elements of out's dtype in.
inline void view_row_contiguous(const mlx::core::array& buffer, int64_t offset, mlx::core::array& out) {
  mlx::core::Strides strides(out.ndim(), 1);
  for (int axis = static_cast<int>(out.ndim()) - 2; axis >= 0; --axis) {
    strides[axis] = strides[axis + 1] * out.shape(axis + 1);
  }
  mlx::core::array::Flags flags;
  flags.contiguous = true;
  flags.row_contiguous = true;
  const auto longest = std::max_element(out.shape().begin(), out.shape().end());
  flags.col_contiguous = out.size() <= 1 || static_cast<int64_t>(out.size()) == *longest;
  out.copy_shared_buffer(buffer, strides, flags, out.size(), offset);
}

} // namespace pagecheck
