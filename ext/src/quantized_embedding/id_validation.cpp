#include "quantized_embedding/id_validation.h"

#include <stdexcept>

#include "common/error_text.h"

namespace pagecheck {

void check_ids_in_range(const int32_t* ids, int64_t count, int vocab_size) {
  for (int64_t token_idx = 0; token_idx < count; ++token_idx) {
    if (ids[token_idx] < 0 || ids[token_idx] >= vocab_size) {
      ErrorText message;
      message << "pagecheck: ids[" << token_idx << "] = " << ids[token_idx] << " is not a row of the table [0, "
              << vocab_size << ")";
      throw std::invalid_argument(message.str());
    }
  }
}

} // namespace pagecheck
