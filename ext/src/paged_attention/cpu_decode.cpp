// Decode schedule: split the context, then merge partial softmax states.
//
// Ownership: work item i owns one (request, kv head, token chunk) and all
// group_size * query_len query rows of that kv head; it reads only its
// chunk's pages and writes only partials[i]. After every item finished, the
// calling thread merges the partials of each (request, kv head) and writes
// its output rows. Chunks end on page boundaries whenever a chunk spans more
// than one page, so a page id is resolved once per chunk that touches it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/attention_rows.h"
#include "common/worker_pool.h"
#include "paged_attention/cpu_schedules.h"

namespace pagecheck {
namespace {

// Fewer keys than this per chunk are not worth a separate partial state.
constexpr int kMinChunkTokens = 256;
// Items per thread, so uneven contexts still balance.
constexpr int kItemsPerThread = 4;
// Below this many multiply-adds the call stays on one thread: waking a
// worker costs more than it saves.
constexpr int64_t kParallelMinWork = int64_t{1} << 20;

struct DecodeItem {
  int request_idx;
  int kv_head_idx;
  int token_begin;
  int token_end;
};

struct DecodePlan {
  std::vector<DecodeItem> items;
  // Items of (request, kv head) h are [head_first_item[h], head_first_item[h + 1]).
  std::vector<int> head_first_item;
  int64_t work = 0;
};

DecodePlan plan_decode(const AttentionShape& shape, const int32_t* context_lens, int num_threads) {
  DecodePlan plan;
  const int num_heads = shape.batch * shape.num_kv_heads;
  const int max_chunks = std::max(1, ceil_div(num_threads * kItemsPerThread, std::max(1, num_heads)));
  plan.head_first_item.reserve(num_heads + 1);
  for (int request_idx = 0; request_idx < shape.batch; ++request_idx) {
    const int context_len = context_lens[request_idx];
    int chunk_len = context_len;
    if (context_len > 0) {
      const int num_chunks = std::clamp(ceil_div(context_len, kMinChunkTokens), 1, max_chunks);
      chunk_len = ceil_div(context_len, num_chunks);
      if (chunk_len > shape.page_size) {
        chunk_len = ceil_div(chunk_len, shape.page_size) * shape.page_size;
      }
    }
    for (int kv_head_idx = 0; kv_head_idx < shape.num_kv_heads; ++kv_head_idx) {
      plan.head_first_item.push_back(static_cast<int>(plan.items.size()));
      for (int token_begin = 0; token_begin < context_len; token_begin += chunk_len) {
        plan.items.push_back(
            {request_idx, kv_head_idx, token_begin, std::min(context_len, token_begin + chunk_len)});
      }
    }
    plan.work += static_cast<int64_t>(context_len) * shape.num_q_heads * shape.query_len * shape.head_dim;
  }
  plan.head_first_item.push_back(static_cast<int>(plan.items.size()));
  return plan;
}

template <typename T, int kHeadDim>
void decode(const AttentionShape& shape, const AttentionOperands<T>& operands) {
  const int head_dim = kHeadDim > 0 ? kHeadDim : shape.head_dim;
  const int group_size = shape.group_size();
  const int num_rows = group_size * shape.query_len;
  const int state_stride = num_rows * (head_dim + 2);
  WorkerPool& pool = WorkerPool::instance();
  const DecodePlan plan = plan_decode(shape, operands.context_lens, pool.num_threads());
  std::vector<float> partials(plan.items.size() * static_cast<size_t>(state_stride));

  // Row r of a block is (group member r / query_len, query position r % query_len).
  auto attend_chunk = [&](int item_idx) {
    const DecodeItem& item = plan.items[item_idx];
    const int context_len = operands.context_lens[item.request_idx];
    RowBlock block(num_rows, head_dim);
    for (int row_idx = 0; row_idx < num_rows; ++row_idx) {
      const int member_idx = row_idx / shape.query_len;
      const int query_pos = row_idx % shape.query_len;
      const int q_head_idx = item.kv_head_idx * group_size + member_idx;
      load_query_row(shape, operands.query, item.request_idx, q_head_idx, query_pos,
                     block.queries.data() + static_cast<size_t>(row_idx) * head_dim);
      block.limits[row_idx] = shape.visible_keys(context_len, query_pos);
    }
    std::vector<float> key_buffer;
    std::vector<float> value_buffer;
    attend_token_range<T, kHeadDim>(
        shape, operands, item.request_idx, item.kv_head_idx, item.token_begin,
        std::min(item.token_end, block.max_limit()), block, key_buffer, value_buffer);
    float* state = partials.data() + static_cast<size_t>(item_idx) * state_stride;
    std::copy(block.max.begin(), block.max.end(), state);
    std::copy(block.sum.begin(), block.sum.end(), state + num_rows);
    std::copy(block.acc.begin(), block.acc.end(), state + 2 * num_rows);
  };
  pool.parallel_for(static_cast<int>(plan.items.size()), attend_chunk, plan.work >= kParallelMinWork);

  // Merge: rescale each chunk's state to the common max, then normalize.
  std::vector<float> merged(head_dim);
  for (int request_idx = 0; request_idx < shape.batch; ++request_idx) {
    for (int kv_head_idx = 0; kv_head_idx < shape.num_kv_heads; ++kv_head_idx) {
      const int head_idx = request_idx * shape.num_kv_heads + kv_head_idx;
      const int first_item = plan.head_first_item[head_idx];
      const int end_item = plan.head_first_item[head_idx + 1];
      for (int row_idx = 0; row_idx < num_rows; ++row_idx) {
        float common_max = -std::numeric_limits<float>::infinity();
        for (int item_idx = first_item; item_idx < end_item; ++item_idx) {
          common_max = std::max(common_max, partials[static_cast<size_t>(item_idx) * state_stride + row_idx]);
        }
        std::fill(merged.begin(), merged.end(), 0.0f);
        float merged_sum = 0.0f;
        for (int item_idx = first_item; item_idx < end_item; ++item_idx) {
          const float* state = partials.data() + static_cast<size_t>(item_idx) * state_stride;
          if (state[row_idx] == -std::numeric_limits<float>::infinity()) {
            continue;  // this chunk holds no key the row may see
          }
          const float weight = std::exp(state[row_idx] - common_max);
          merged_sum += weight * state[num_rows + row_idx];
          const float* acc = state + 2 * num_rows + static_cast<size_t>(row_idx) * head_dim;
          for (int dim_idx = 0; dim_idx < head_dim; ++dim_idx) {
            merged[dim_idx] += weight * acc[dim_idx];
          }
        }
        const int member_idx = row_idx / shape.query_len;
        const int query_pos = row_idx % shape.query_len;
        const int q_head_idx = kv_head_idx * group_size + member_idx;
        T* dst = operands.out + shape.row_offset(request_idx, q_head_idx, query_pos);
        store_output_row(merged.data(), merged_sum, head_dim, dst);
      }
    }
  }
}

} // namespace

template <typename T>
void run_decode_cpu(const AttentionShape& shape, const AttentionOperands<T>& operands) {
  if (shape.head_dim == 128) {
    decode<T, 128>(shape, operands);
  } else {
    decode<T, 0>(shape, operands);
  }
}

template void run_decode_cpu<float>(const AttentionShape&, const AttentionOperands<float>&);
template void run_decode_cpu<bfloat16_t>(const AttentionShape&, const AttentionOperands<bfloat16_t>&);
template void run_decode_cpu<float16_t>(const AttentionShape&, const AttentionOperands<float16_t>&);

} // namespace pagecheck
