#include "common/gpu_dispatch.h"

#include <stdexcept>
#include <string>

namespace pagecheck {

const char* gpu_schedule_name(const AttentionShape& shape) {
  return shape.query_len <= kDecodeMaxQueryLen ? "paged_decode" : "paged_prefill";
}

void eval_attention_gpu(
    const AttentionShape& shape,
    const std::vector<mlx::core::array>& inputs,
    mlx::core::array& out,
    mlx::core::Stream stream) {
  throw std::runtime_error(
      std::string("pagecheck: GPU kernels not built/available (schedule ") + gpu_schedule_name(shape) +
      "); run on the CPU stream");
}

} // namespace pagecheck
