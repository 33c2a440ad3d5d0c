#include "quantized_embedding/gpu_kernel.h"

#include <algorithm>
#include <optional>
#include <tuple>

#include "common/lazy_cuda_kernel.h"

namespace pagecheck {

namespace mx = mlx::core;

namespace {

constexpr int kThreadsPerBlock = 256;

LazyCudaKernel kQuantizedEmbedding{"quantized_embedding", "quantized_embedding", {"ids", "weight", "scales", "biases"},
                                   {"out"}};

} // namespace

void eval_quantized_embedding_gpu(
    const std::vector<mx::array>& inputs,
    mx::array& out,
    int group_size,
    int bits,
    mx::Stream stream) {
  const int num_threads = static_cast<int>(inputs[0].size()) * inputs[1].shape(1);
  kQuantizedEmbedding.run(
      inputs, {out}, std::make_tuple(std::max(num_threads, 1), 1, 1), std::make_tuple(kThreadsPerBlock, 1, 1),
      {{"T", out.dtype()}, {"BITS", bits}, {"GROUP_SIZE", group_size}}, std::nullopt, stream);
}

} // namespace pagecheck
