// Value checks on block tables and context lengths, run at the call on the
// values read there (common/ready_inputs.h) and again inside the CPU task
// before any K/V memory is read (for values that were tracers at the call).
// Each throws std::invalid_argument naming field and value.
#pragma once

#include <cstdint>

#include "common/attention_shape.h"

namespace pagecheck {

// Every context in [0, capacity], and 0 < context < query_len rejected: the
// queries are the last query_len positions of the context.
void validate_context_lens(const AttentionShape& shape, const int32_t* context_lens, int64_t capacity,
                           const char* capacity_name);

// Context lengths as above with capacity pages_per_request * page_size, every
// live block-table entry (page index < ceil(context / page_size)) in
// [0, num_pages), every other entry -1.
void validate_paged_metadata(const AttentionShape& shape, const int32_t* block_table, const int32_t* context_lens);

} // namespace pagecheck
