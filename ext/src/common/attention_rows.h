// Online softmax over a token range for a block of query rows that share one
// kv head: the inner loop of both CPU schedules.
//
// Ownership: one caller owns one RowBlock (its queries, limits and running
// state) and reads K/V of one (request, kv head) for tokens
// [token_begin, token_end). Tokens are visited page by page: the page id is
// read from the block table once per page, then the page's slots are
// converted to float32 in blocks of kTokenBlock tokens that every row of the
// block reuses. Slots at or past a row's visible limit are never read into
// arithmetic, so poisoned (NaN) unused slots cannot leak into the output.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "common/attention_shape.h"
#include "common/dtype_convert.h"
#include "common/fast_exp.h"

namespace pagecheck {

constexpr int kTokenBlock = 32;

// Float32 state of num_rows query rows: scaled queries, per-row visible key
// limits, and the running (max, sum, unnormalized output) of online softmax.
struct RowBlock {
  int num_rows = 0;
  int head_dim = 0;
  std::vector<float> queries;   // [num_rows, head_dim], already scaled
  std::vector<int> limits;      // visible keys per row
  std::vector<float> max;       // running max score per row
  std::vector<float> sum;       // running sum of exp(score - max)
  std::vector<float> acc;       // [num_rows, head_dim]

  RowBlock(int rows, int dim)
      : num_rows(rows),
        head_dim(dim),
        queries(static_cast<size_t>(rows) * dim),
        limits(rows, 0),
        max(rows, -std::numeric_limits<float>::infinity()),
        sum(rows, 0.0f),
        acc(static_cast<size_t>(rows) * dim, 0.0f) {}

  void reset_state() {
    std::fill(max.begin(), max.end(), -std::numeric_limits<float>::infinity());
    std::fill(sum.begin(), sum.end(), 0.0f);
    std::fill(acc.begin(), acc.end(), 0.0f);
  }

  int max_limit() const {
    int limit = 0;
    for (int row_idx = 0; row_idx < num_rows; ++row_idx) {
      limit = std::max(limit, limits[row_idx]);
    }
    return limit;
  }
};

// Loads query row (request, q head, query position) into block row row_idx,
// multiplied by the softmax scale so scores need no extra multiply.
template <typename T>
void load_query_row(
    const AttentionShape& shape,
    const T* query,
    int request_idx,
    int q_head_idx,
    int query_pos,
    float* dst) {
  load_floats(
      query + shape.row_offset(request_idx, q_head_idx, query_pos),
      dst,
      shape.head_dim);
  for (int dim_idx = 0; dim_idx < shape.head_dim; ++dim_idx) {
    dst[dim_idx] *= shape.scale;
  }
}

// Lanes of one accumulator tile: the output dims a row updates per pass over
// a token block. A GCC/Clang vector type keeps the tile in registers across
// the tokens (one AVX-512 register, two AVX2 ones); left to itself the
// compiler vectorizes across tokens instead and spills.
constexpr int kAccTile = 16;
typedef float AccTile __attribute__((vector_size(kAccTile * sizeof(float))));

inline AccTile load_tile(const float* src) {
  AccTile tile;
  std::memcpy(&tile, src, sizeof(tile));
  return tile;
}

inline void store_tile(const AccTile& tile, float* dst) {
  std::memcpy(dst, &tile, sizeof(tile));
}

// Folds one block of converted keys/values into every row that sees any of
// them: scores, block max, rescale of the running state, weights, weighted
// values. kHeadDim > 0 fixes the head dim at compile time (fully unrolled
// inner loops); 0 reads it from the block.
template <int kHeadDim>
void fold_token_block(
    RowBlock& block,
    const float* __restrict keys,
    const float* __restrict values,
    int block_pos,
    int block_len) {
  const int head_dim = kHeadDim > 0 ? kHeadDim : block.head_dim;
  alignas(64) float weights[kTokenBlock];
  for (int row_idx = 0; row_idx < block.num_rows; ++row_idx) {
    const int visible = std::min(block_len, block.limits[row_idx] - block_pos);
    if (visible <= 0) {
      continue;
    }
    // Step 1: scores of the visible keys.
    const float* __restrict query = block.queries.data() + row_idx * head_dim;
    for (int token_idx = 0; token_idx < visible; ++token_idx) {
      const float* __restrict key = keys + token_idx * head_dim;
      float dot = 0.0f;
      for (int dim_idx = 0; dim_idx < head_dim; ++dim_idx) {
        dot += query[dim_idx] * key[dim_idx];
      }
      weights[token_idx] = dot;
    }
    float block_max = -std::numeric_limits<float>::infinity();
    for (int token_idx = 0; token_idx < visible; ++token_idx) {
      block_max = weights[token_idx] > block_max ? weights[token_idx] : block_max;
    }
    // Step 2: new running max; exp(-inf) = 0 clears the empty initial state.
    const float old_max = block.max[row_idx];
    const float new_max = std::max(old_max, block_max);
    const float correction = std::exp(old_max - new_max);
    float block_sum = 0.0f;
    for (int token_idx = 0; token_idx < visible; ++token_idx) {
      weights[token_idx] = fast_exp(weights[token_idx] - new_max);
      block_sum += weights[token_idx];
    }
    block.sum[row_idx] = block.sum[row_idx] * correction + block_sum;
    block.max[row_idx] = new_max;
    // Step 3: acc = acc * correction + sum_t weight_t * value_t, one tile of
    // output dims at a time so the tile stays in registers across tokens.
    float* __restrict acc = block.acc.data() + row_idx * head_dim;
    int tile_base = 0;
    for (; tile_base + kAccTile <= head_dim; tile_base += kAccTile) {
      AccTile tile = load_tile(acc + tile_base) * correction;
      for (int token_idx = 0; token_idx < visible; ++token_idx) {
        tile += weights[token_idx] * load_tile(values + token_idx * head_dim + tile_base);
      }
      store_tile(tile, acc + tile_base);
    }
    for (int dim_idx = tile_base; dim_idx < head_dim; ++dim_idx) {
      float lane = acc[dim_idx] * correction;
      for (int token_idx = 0; token_idx < visible; ++token_idx) {
        lane += weights[token_idx] * values[token_idx * head_dim + dim_idx];
      }
      acc[dim_idx] = lane;
    }
  }
}

// Walks tokens [token_begin, token_end) of one request and kv head through
// the block table and folds them into the block. The caller has validated
// every live page id and keeps token_end within the request's context.
template <typename T, int kHeadDim>
void attend_token_range(
    const AttentionShape& shape,
    const AttentionOperands<T>& operands,
    int request_idx,
    int kv_head_idx,
    int token_begin,
    int token_end,
    RowBlock& block,
    std::vector<float>& key_buffer,
    std::vector<float>& value_buffer) {
  const int head_dim = kHeadDim > 0 ? kHeadDim : shape.head_dim;
  const int page_size = shape.page_size;
  const int32_t* table_row = operands.block_table +
      static_cast<int64_t>(request_idx) * shape.pages_per_request;
  key_buffer.resize(static_cast<size_t>(kTokenBlock) * head_dim);
  value_buffer.resize(static_cast<size_t>(kTokenBlock) * head_dim);

  for (int token_pos = token_begin; token_pos < token_end;) {
    const int page_idx = token_pos / page_size;
    const int slot_idx = token_pos - page_idx * page_size;
    const int run_len = std::min(page_size - slot_idx, token_end - token_pos);
    const int64_t page_id = table_row[page_idx];
    const int64_t run_offset =
        ((page_id * shape.num_kv_heads + kv_head_idx) * page_size + slot_idx) *
        head_dim;
    const T* key_run = operands.key_pages + run_offset;
    const T* value_run = operands.value_pages + run_offset;

    for (int block_start = 0; block_start < run_len;
         block_start += kTokenBlock) {
      const int block_len = std::min(kTokenBlock, run_len - block_start);
      const int64_t element_offset =
          static_cast<int64_t>(block_start) * head_dim;
      load_floats(
          key_run + element_offset, key_buffer.data(), block_len * head_dim);
      load_floats(
          value_run + element_offset,
          value_buffer.data(),
          block_len * head_dim);
      fold_token_block<kHeadDim>(
          block,
          key_buffer.data(),
          value_buffer.data(),
          token_pos + block_start,
          block_len);
    }
    token_pos += run_len;
  }
}

// Writes a normalized row. A row that saw no key (context 0) has sum 0 and
// becomes zeros; a NaN sum (NaN in live K/V) stays NaN.
template <typename T>
void store_output_row(const float* acc, float sum, int head_dim, T* dst) {
  if (sum == 0.0f) {
    for (int dim_idx = 0; dim_idx < head_dim; ++dim_idx) {
      dst[dim_idx] = store_float<T>(0.0f);
    }
    return;
  }
  const float inv_sum = 1.0f / sum;
  for (int dim_idx = 0; dim_idx < head_dim; ++dim_idx) {
    dst[dim_idx] = store_float<T>(acc[dim_idx] * inv_sum);
  }
}

inline int ceil_div(int numerator, int denominator) {
  return (numerator + denominator - 1) / denominator;
}

} // namespace pagecheck
