#include "common/error_text.h"

namespace pagecheck {

const char* dtype_name(mlx::core::Dtype dtype) {
  using Val = mlx::core::Dtype::Val;
  switch (dtype.val()) {
    case Val::bool_:
      return "bool";
    case Val::uint8:
      return "uint8";
    case Val::uint16:
      return "uint16";
    case Val::uint32:
      return "uint32";
    case Val::uint64:
      return "uint64";
    case Val::int8:
      return "int8";
    case Val::int16:
      return "int16";
    case Val::int32:
      return "int32";
    case Val::int64:
      return "int64";
    case Val::float16:
      return "float16";
    case Val::float32:
      return "float32";
    case Val::float64:
      return "float64";
    case Val::bfloat16:
      return "bfloat16";
    case Val::complex64:
      return "complex64";
  }
  return "an unknown dtype";
}

} // namespace pagecheck
