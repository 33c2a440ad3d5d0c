// The one place that maps an MLX dtype to the C++ storage type of K/V/query.
#pragma once

#include <stdexcept>
#include <string>

#include "common/dtype_convert.h"
#include "mlx/dtype.h"

namespace pagecheck {

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls fn(TypeTag<T>{}) for the storage type of dtype. The default throws,
// so an unsupported dtype can never fall through to no kernel at all.
template <typename Fn>
void dispatch_storage_dtype(mlx::core::Dtype dtype, Fn&& fn) {
  switch (dtype) {
    case mlx::core::float32:
      fn(TypeTag<float>{});
      break;
    case mlx::core::bfloat16:
      fn(TypeTag<bfloat16_t>{});
      break;
    case mlx::core::float16:
      fn(TypeTag<float16_t>{});
      break;
    default:
      throw std::invalid_argument(
          "pagecheck: unsupported attention dtype; use float32, bfloat16 or float16");
  }
}

} // namespace pagecheck
