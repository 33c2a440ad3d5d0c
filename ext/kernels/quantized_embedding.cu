// Kernel body of quantized_embedding (MLX's cuda_kernel writes the signature:
// inputs ids, weight, scales, biases; output out; template arguments T, BITS,
// GROUP_SIZE). Grid: one thread per packed word of every requested row.
//
// Ownership: thread `thread_idx` owns word `word_idx` of output row
// `token_idx`. It reads ids[token_idx], that one uint32 of the table row, and
// the scale and bias of the word's group (a word never straddles two groups),
// and writes the word's VALUES_PER_WORD consecutive outputs; no two threads
// write the same element. An id outside [0, vocab_size) writes NaN, since a
// kernel cannot raise (the op rejects such ids when they are known at the call,
// and the CPU route raises at evaluation).
constexpr int VALUES_PER_WORD = 32 / BITS;
constexpr uint32_t VALUE_MASK = (1u << BITS) - 1u;

// Positions.
const int64_t thread_idx = cg::this_grid().thread_rank();
const int64_t num_tokens = ids_shape[0];
const int vocab_size = weight_shape[0];
const int words_per_row = weight_shape[1];
const int groups_per_row = scales_shape[1];
const int64_t token_idx = thread_idx / words_per_row;
const int word_idx = static_cast<int>(thread_idx % words_per_row);
if (token_idx >= num_tokens) {
  return;
}
const int group_idx = word_idx * VALUES_PER_WORD / GROUP_SIZE;
T* out_word = out + token_idx * words_per_row * VALUES_PER_WORD + word_idx * VALUES_PER_WORD;

// Unknown row: visible NaN instead of a read outside the table.
const int32_t row_idx = ids[token_idx];
if (row_idx < 0 || row_idx >= vocab_size) {
  for (int value_idx = 0; value_idx < VALUES_PER_WORD; ++value_idx) {
    out_word[value_idx] = static_cast<T>(cuda::std::numeric_limits<float>::quiet_NaN());
  }
  return;
}

// Dequantize as MLX's CUDA dequantize does: scale * level + bias in T, which
// the compiler contracts into one fused multiply-add, so the exact value is
// rounded to T once (MLX's CPU rounds the product first; the CPU op follows
// that order). A double holds level * scale + bias exactly (a level has at
// most 8 bits, a 16-bit scale or bias at most 11 significant bits), so
// converting it rounds once; float32 tables take fmaf directly.
const uint32_t word = weight[static_cast<int64_t>(row_idx) * words_per_row + word_idx];
const T scale = scales[static_cast<int64_t>(row_idx) * groups_per_row + group_idx];
const T bias = biases[static_cast<int64_t>(row_idx) * groups_per_row + group_idx];
for (int value_idx = 0; value_idx < VALUES_PER_WORD; ++value_idx) {
  const uint32_t level = (word >> (BITS * value_idx)) & VALUE_MASK;
  if constexpr (sizeof(T) == sizeof(float)) {
    out_word[value_idx] = fmaf(static_cast<float>(scale), static_cast<float>(level), static_cast<float>(bias));
  } else {
    const double exact =
        static_cast<double>(static_cast<float>(scale)) * level + static_cast<double>(static_cast<float>(bias));
    out_word[value_idx] = T(exact);
  }
}
