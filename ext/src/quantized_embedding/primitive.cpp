#include "quantized_embedding/primitive.h"

#include <cstdint>
#include <stdexcept>

#include "common/cpu_eval.h"
#include "common/dtype_dispatch.h"
#include "quantized_embedding/gpu_kernel.h"
#include "quantized_embedding/id_validation.h"

namespace pagecheck {

namespace mx = mlx::core;

namespace {

struct EmbeddingShape {
  int64_t num_tokens;
  int vocab_size;
  int words_per_row;
  int groups_per_row;
};

// One token row at a time: word `word_idx` of the row holds values
// word_idx * values_per_word ... + values_per_word - 1, lowest bits first, all
// in one group (group_size is a multiple of values_per_word). The value is
// rounded to T after the multiply and again after the add, as MLX's
// dequantize does, so both agree bit for bit.
template <typename T, int BITS>
void embed_rows_cpu(const EmbeddingShape& shape, const int32_t* ids, const uint32_t* weight, const T* scales,
                    const T* biases, T* out) {
  constexpr int values_per_word = 32 / BITS;
  constexpr uint32_t value_mask = (1u << BITS) - 1u;
  const int64_t dims = static_cast<int64_t>(shape.words_per_row) * values_per_word;
  const int values_per_group = static_cast<int>(dims / shape.groups_per_row);
  check_ids_in_range(ids, shape.num_tokens, shape.vocab_size);
  for (int64_t token_idx = 0; token_idx < shape.num_tokens; ++token_idx) {
    const int32_t row_idx = ids[token_idx];
    const uint32_t* weight_row = weight + static_cast<int64_t>(row_idx) * shape.words_per_row;
    const T* scale_row = scales + static_cast<int64_t>(row_idx) * shape.groups_per_row;
    const T* bias_row = biases + static_cast<int64_t>(row_idx) * shape.groups_per_row;
    T* out_row = out + token_idx * dims;
    for (int word_idx = 0; word_idx < shape.words_per_row; ++word_idx) {
      const int group_idx = word_idx * values_per_word / values_per_group;
      const float scale = static_cast<float>(scale_row[group_idx]);
      const float bias = static_cast<float>(bias_row[group_idx]);
      const uint32_t word = weight_row[word_idx];
      for (int value_idx = 0; value_idx < values_per_word; ++value_idx) {
        const float level = static_cast<float>((word >> (BITS * value_idx)) & value_mask);
        const T scaled = static_cast<T>(level * scale);
        out_row[word_idx * values_per_word + value_idx] = static_cast<T>(static_cast<float>(scaled) + bias);
      }
    }
  }
}

template <typename Fn>
void dispatch_bits(int bits, Fn&& fn) {
  switch (bits) {
    case 4:
      fn(std::integral_constant<int, 4>{});
      break;
    case 8:
      fn(std::integral_constant<int, 8>{});
      break;
    default:
      throw std::invalid_argument("pagecheck: quantized_embedding supports bits 4 and 8");
  }
}

} // namespace

void QuantizedEmbedding::eval_cpu(const std::vector<mx::array>& inputs, mx::array& out) {
  const EmbeddingShape shape{
      static_cast<int64_t>(inputs[0].size()), inputs[1].shape(0), inputs[1].shape(1), inputs[2].shape(1)};
  auto& encoder = begin_cpu_eval("QuantizedEmbedding", inputs, out, stream());
  dispatch_storage_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_bits(bits_, [&](auto bits_tag) {
      constexpr int BITS = decltype(bits_tag)::value;
      encoder.dispatch([shape, arrays = task_arrays(inputs, out)]() mutable {
        embed_rows_cpu<T, BITS>(
            shape, arrays[0].data<int32_t>(), arrays[1].data<uint32_t>(), arrays[2].data<T>(), arrays[3].data<T>(),
            arrays[4].data<T>());
      });
    });
  });
}

void QuantizedEmbedding::eval_gpu(const std::vector<mx::array>& inputs, mx::array& out) {
  eval_quantized_embedding_gpu(inputs, out, group_size_, bits_, stream());
}

bool QuantizedEmbedding::is_equivalent(const mx::Primitive& other) const {
  const auto* that = dynamic_cast<const QuantizedEmbedding*>(&other);
  return that != nullptr && group_size_ == that->group_size_ && bits_ == that->bits_;
}

std::vector<mx::Shape> QuantizedEmbedding::output_shapes(const std::vector<mx::array>& inputs) {
  return {{static_cast<int>(inputs[0].size()), inputs[1].shape(1) * 32 / bits_}};
}

} // namespace pagecheck
