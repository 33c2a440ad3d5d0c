// The GPU seam. eval_gpu of both attention primitives comes here; the schedule
// is chosen by query length as on the CPU (decode vs prefill). The kernels
// themselves will be JIT-compiled through mlx::core::fast::cuda_kernel from
// sources in ext/kernels/, one file per schedule; until they exist every GPU
// call throws std::runtime_error naming the schedule it would have run.
#pragma once

#include <vector>

#include "common/attention_shape.h"
#include "mlx/array.h"
#include "mlx/stream.h"

namespace pagecheck {

// The name of the GPU schedule for this shape: "paged_decode" or "paged_prefill".
const char* gpu_schedule_name(const AttentionShape& shape);

void eval_attention_gpu(
    const AttentionShape& shape,
    const std::vector<mlx::core::array>& inputs,
    mlx::core::array& out,
    mlx::core::Stream stream);

} // namespace pagecheck
