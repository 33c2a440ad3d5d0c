// Prefill schedule: split query rows, walk each request's pages once per tile.
//
// Ownership: work item i owns one (request, kv head, tile of query
// positions) and the group_size * tile_len query rows of that kv head; it
// reads the request's pages up to the largest visible key of its rows and
// writes exactly its own output rows. No state is shared between items.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/attention_rows.h"
#include "common/worker_pool.h"
#include "paged_attention/cpu_schedules.h"

namespace pagecheck {
namespace {

// Query positions per tile: the tile's rows share every converted key block.
constexpr int kPrefillRowTile = 16;
// Below this many multiply-adds the call stays on one thread.
constexpr int64_t kParallelMinWork = int64_t{1} << 20;

template <typename T, int kHeadDim>
void prefill(const AttentionShape& shape, const AttentionOperands<T>& operands) {
  const int head_dim = kHeadDim > 0 ? kHeadDim : shape.head_dim;
  const int group_size = shape.group_size();
  const int num_tiles = ceil_div(shape.query_len, kPrefillRowTile);
  const int num_items = shape.batch * shape.num_kv_heads * num_tiles;
  int64_t work = 0;
  for (int request_idx = 0; request_idx < shape.batch; ++request_idx) {
    work += static_cast<int64_t>(operands.context_lens[request_idx]) * shape.num_q_heads * shape.query_len * head_dim;
  }

  // Item i is (request, kv head, tile) in row-major order; row r of its
  // block is (group member r / tile_len, query position first_pos + r % tile_len).
  auto attend_tile = [&](int item_idx) {
    const int tile_idx = item_idx % num_tiles;
    const int kv_head_idx = (item_idx / num_tiles) % shape.num_kv_heads;
    const int request_idx = item_idx / (num_tiles * shape.num_kv_heads);
    const int first_pos = tile_idx * kPrefillRowTile;
    const int tile_len = std::min(kPrefillRowTile, shape.query_len - first_pos);
    const int num_rows = group_size * tile_len;
    const int context_len = operands.context_lens[request_idx];
    RowBlock block(num_rows, head_dim);
    for (int row_idx = 0; row_idx < num_rows; ++row_idx) {
      const int member_idx = row_idx / tile_len;
      const int query_pos = first_pos + row_idx % tile_len;
      const int q_head_idx = kv_head_idx * group_size + member_idx;
      load_query_row(shape, operands.query, request_idx, q_head_idx, query_pos,
                     block.queries.data() + static_cast<size_t>(row_idx) * head_dim);
      block.limits[row_idx] = context_len > 0 ? shape.visible_keys(context_len, query_pos) : 0;
    }
    std::vector<float> key_buffer;
    std::vector<float> value_buffer;
    attend_token_range<T, kHeadDim>(
        shape, operands, request_idx, kv_head_idx, 0, std::min(context_len, block.max_limit()),
        block, key_buffer, value_buffer);
    for (int row_idx = 0; row_idx < num_rows; ++row_idx) {
      const int member_idx = row_idx / tile_len;
      const int query_pos = first_pos + row_idx % tile_len;
      const int q_head_idx = kv_head_idx * group_size + member_idx;
      T* dst = operands.out + shape.row_offset(request_idx, q_head_idx, query_pos);
      store_output_row(block.acc.data() + static_cast<size_t>(row_idx) * head_dim, block.sum[row_idx], head_dim, dst);
    }
  };
  WorkerPool::instance().parallel_for(num_items, attend_tile, work >= kParallelMinWork);
}

} // namespace

template <typename T>
void run_prefill_cpu(const AttentionShape& shape, const AttentionOperands<T>& operands) {
  if (shape.head_dim == 128) {
    prefill<T, 128>(shape, operands);
  } else {
    prefill<T, 0>(shape, operands);
  }
}

template void run_prefill_cpu<float>(const AttentionShape&, const AttentionOperands<float>&);
template void run_prefill_cpu<bfloat16_t>(const AttentionShape&, const AttentionOperands<bfloat16_t>&);
template void run_prefill_cpu<float16_t>(const AttentionShape&, const AttentionOperands<float16_t>&);

} // namespace pagecheck
