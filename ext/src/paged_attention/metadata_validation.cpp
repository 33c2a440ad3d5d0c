#include "paged_attention/metadata_validation.h"

#include <stdexcept>

#include "common/attention_rows.h"
#include "common/error_text.h"

namespace pagecheck {

void validate_context_lens(const AttentionShape& shape, const int32_t* context_lens, int64_t capacity,
                           const char* capacity_name) {
  for (int request_idx = 0; request_idx < shape.batch; ++request_idx) {
    const int64_t context_len = context_lens[request_idx];
    ErrorText message;
    if (context_len < 0) {
      message << "pagecheck: context_lens[" << request_idx << "] = " << context_len << " must be nonnegative";
    } else if (context_len > capacity) {
      message << "pagecheck: context_lens[" << request_idx << "] = " << context_len << " is not covered by "
              << capacity_name << " = " << capacity;
    } else if (context_len > 0 && context_len < shape.query_len) {
      message << "pagecheck: context_lens[" << request_idx << "] = " << context_len
              << " must be zero or at least query length L = " << shape.query_len
              << " (queries are the last L positions of the context)";
    } else {
      continue;
    }
    throw std::invalid_argument(message.str());
  }
}

void validate_paged_metadata(const AttentionShape& shape, const int32_t* block_table, const int32_t* context_lens) {
  validate_context_lens(shape, context_lens, static_cast<int64_t>(shape.pages_per_request) * shape.page_size,
                        "block_table columns * page_size");
  for (int request_idx = 0; request_idx < shape.batch; ++request_idx) {
    const int live_pages = ceil_div(context_lens[request_idx], shape.page_size);
    const int32_t* table_row = block_table + static_cast<int64_t>(request_idx) * shape.pages_per_request;
    for (int page_idx = 0; page_idx < shape.pages_per_request; ++page_idx) {
      const int64_t page_id = table_row[page_idx];
      const bool live = page_idx < live_pages;
      ErrorText message;
      if (live && (page_id < 0 || page_id >= shape.num_pages)) {
        message << "pagecheck: block_table[" << request_idx << ", " << page_idx << "] = " << page_id
                << " is outside physical page storage [0, " << shape.num_pages
                << ") but holds positions of context_lens[" << request_idx << "] = " << context_lens[request_idx];
      } else if (!live && page_id != -1) {
        message << "pagecheck: block_table[" << request_idx << ", " << page_idx << "] = " << page_id
                << " lies past context_lens[" << request_idx << "] = " << context_lens[request_idx]
                << ": padding must use the -1 sentinel";
      } else {
        continue;
      }
      throw std::invalid_argument(message.str());
    }
  }
}

} // namespace pagecheck
