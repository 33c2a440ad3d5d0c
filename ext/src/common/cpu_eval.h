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

// Non-owning copies of the inputs followed by the output, for the dispatched
// task to take data pointers from. Pointers must be taken inside the task,
// once the stream has waited for the inputs' producers: on MLX's CUDA
// back-end an input made on the GPU is readable by the host only then
// (taking them earlier crashed on the H200; MLX's own CPU ops do the same).
std::vector<mlx::core::array> task_arrays(const std::vector<mlx::core::array>& inputs, const mlx::core::array& out);

} // namespace pagecheck
