// The geometry and operands of one attention call in paged form.
//
// A dense K/V of shape [B, Hkv, S, D] is the same layout as a pool of B pages
// of S slots with block_table[b] = {b}; the dense op reuses the paged
// schedules through that view.
#pragma once

#include <cstdint>

namespace pagecheck {

// Query lengths up to this run the decode schedule (context split across
// threads); longer ones run the prefill schedule (query rows split).
constexpr int kDecodeMaxQueryLen = 8;

struct AttentionShape {
  int batch = 0;
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int query_len = 0;
  int head_dim = 0;
  int page_size = 0;
  int pages_per_request = 0;  // columns of the block table
  int64_t num_pages = 0;
  float scale = 1.0f;
  bool causal = false;

  int group_size() const {
    return num_q_heads / num_kv_heads;
  }
  // The query head h reads kv head h / group_size(): the one GQA rule.
  int kv_head_of(int q_head_idx) const {
    return q_head_idx / group_size();
  }
  // Keys that query row `row_idx` may see. Queries are the last query_len
  // positions of the context, so with a causal mask row l sees keys
  // s <= l + context_len - query_len.
  int visible_keys(int context_len, int row_idx) const {
    return causal ? context_len - query_len + row_idx + 1 : context_len;
  }
  // Element offset of one query/output row in a [B, Hq, L, D] array.
  int64_t row_offset(int request_idx, int q_head_idx, int query_pos) const {
    return ((static_cast<int64_t>(request_idx) * num_q_heads + q_head_idx) *
                query_len +
            query_pos) *
        head_dim;
  }
};

template <typename T>
struct AttentionOperands {
  const T* query;          // [B, Hq, L, D]
  const T* key_pages;      // [P, Hkv, page_size, D]
  const T* value_pages;    // [P, Hkv, page_size, D]
  const int32_t* block_table;   // [B, pages_per_request], -1 padded
  const int32_t* context_lens;  // [B]
  T* out;                  // [B, Hq, L, D]
};

} // namespace pagecheck
