// The value check on token ids, run at the call on the values read there
// (common/ready_inputs.h) and again inside the CPU task before any table row
// is read (for ids that were tracers at the call). Throws
// std::invalid_argument naming the first bad id.
#pragma once

#include <cstdint>

namespace pagecheck {

void check_ids_in_range(const int32_t* ids, int64_t count, int vocab_size);

} // namespace pagecheck
