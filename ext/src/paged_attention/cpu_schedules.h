// The two CPU schedules of paged attention, chosen by query length.
#pragma once

#include "common/attention_shape.h"

namespace pagecheck {

// Decode (query_len <= kDecodeMaxQueryLen): every (request, kv head) context
// is split into chunks that threads process independently; their partial
// (max, sum, output) states are merged afterwards.
template <typename T>
void run_decode_cpu(const AttentionShape& shape, const AttentionOperands<T>& operands);

// Prefill (longer queries): tiles of query rows are split across threads and
// each tile walks its request's pages, keys of one page block at a time.
template <typename T>
void run_prefill_cpu(const AttentionShape& shape, const AttentionOperands<T>& operands);

template <typename T>
void run_attention_cpu(const AttentionShape& shape, const AttentionOperands<T>& operands) {
  if (shape.query_len <= kDecodeMaxQueryLen) {
    run_decode_cpu<T>(shape, operands);
  } else {
    run_prefill_cpu<T>(shape, operands);
  }
}

} // namespace pagecheck
