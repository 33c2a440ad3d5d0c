// Error messages built by appending text and numbers, without iostreams.
//
// Why not std::ostringstream: on the H200 machine the extension is built by a
// GCC 13.3 under /opt/gcc while the process runs its own libstdc++, and the
// first number formatted through an ostringstream (an error message about a
// bad context length) segfaulted inside the stream's number formatting
// instead of raising ValueError (cuda-gdb: validate_context_lens ->
// ostream::_M_insert<long>). std::to_string formats with the C library and
// never touches a C++ locale, so an error stays an error on any toolchain.
#pragma once

#include <string>
#include <type_traits>

#include "mlx/dtype.h"

namespace pagecheck {

// MLX's name of a dtype ("bfloat16"), as Python prints it after "mlx.core.".
const char* dtype_name(mlx::core::Dtype dtype);

class ErrorText {
 public:
  ErrorText& operator<<(const char* text) {
    text_ += text;
    return *this;
  }
  ErrorText& operator<<(const std::string& text) {
    text_ += text;
    return *this;
  }
  ErrorText& operator<<(mlx::core::Dtype dtype) {
    text_ += dtype_name(dtype);
    return *this;
  }
  template <typename Number, std::enable_if_t<std::is_arithmetic_v<Number> && !std::is_same_v<Number, char>, int> = 0>
  ErrorText& operator<<(Number value) {
    text_ += std::to_string(value);
    return *this;
  }
  const std::string& str() const {
    return text_;
  }

 private:
  std::string text_;
};

} // namespace pagecheck
