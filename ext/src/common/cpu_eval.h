// The steps every attention primitive's eval_cpu takes before it dispatches.
#pragma once

#include <vector>

#include "mlx/array.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/stream.h"

namespace pagecheck {

// Checks that the op delivered row-contiguous inputs, allocates the output and
// registers inputs and output with the stream's encoder, which it returns.
mlx::core::cpu::CommandEncoder& begin_cpu_eval(
    const char* primitive_name,
    const std::vector<mlx::core::array>& inputs,
    mlx::core::array& out,
    mlx::core::Stream stream);

} // namespace pagecheck
