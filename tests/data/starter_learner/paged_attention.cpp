// A learner's Week 3 Day 4 CPU path for the course's starter extension, used by
// tests/test_course_starter.py to show that `pagecheck grade` builds a checkout's
// extension and runs its PagedAttention::eval_cpu. It replaces the starter's
// src/extensions/src/paged_attention.cpp; the Day 3 parts stay starter stubs.
//
// The op converts every input to a row-contiguous float32 (block table and
// context lengths to int32) and casts the result back to the query's dtype. The
// primitive walks each request's block table one position at a time with an
// online softmax; a row with no visible position is zero.
#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "mlx/allocator.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/ops.h"
#include "tiny_llm_ext.h"

namespace tiny_llm_ext {

namespace {

[[noreturn]] void checkpoint_todo(const char *function, const char *checkpoint) {
    throw std::runtime_error(std::string(function) + " is a starter stub; implement it in " + checkpoint);
}

}  // namespace

// Week 3, Day 3.
mx::array paged_cache_update(const mx::array &, const mx::array &, int, int, mx::StreamOrDevice) {
    checkpoint_todo("paged_cache_update", "Week 3, Day 3");
}

void PagedCacheUpdate::eval_cpu(const std::vector<mx::array> &, std::vector<mx::array> &) {
    checkpoint_todo("PagedCacheUpdate::eval_cpu", "Week 3, Day 3");
}

void PagedCacheUpdate::eval_gpu(const std::vector<mx::array> &, std::vector<mx::array> &) {
    checkpoint_todo("PagedCacheUpdate::eval_gpu", "Week 3, Day 3");
}

// Week 3, Day 4.
mx::array paged_attention(const mx::array &q, const mx::array &key_pages, const mx::array &value_pages,
                          const mx::array &block_table, const mx::array &context_lens, const float scale,
                          const bool is_causal, const int num_kv_heads, const int num_heads, mx::StreamOrDevice s) {
    if (num_kv_heads <= 0 || num_heads % num_kv_heads != 0) {
        throw std::invalid_argument("paged_attention: num_heads must be a multiple of num_kv_heads");
    }
    const mx::Stream stream = mx::to_stream(s);
    auto prepared = [&](const mx::array &x, mx::Dtype dtype) {
        return mx::contiguous(mx::astype(x, dtype, stream), false, stream);
    };
    mx::array out(q.shape(), mx::float32,
                  std::make_shared<PagedAttention>(stream, scale, is_causal, num_kv_heads, num_heads),
                  {prepared(q, mx::float32), prepared(key_pages, mx::float32), prepared(value_pages, mx::float32),
                   prepared(block_table, mx::int32), prepared(context_lens, mx::int32)});
    return mx::astype(out, q.dtype(), stream);
}

void PagedAttention::eval_cpu(const std::vector<mx::array> &inputs, std::vector<mx::array> &outputs) {
    mx::array &out = outputs[0];
    out.set_data(mx::allocator::malloc(out.nbytes()));
    auto &encoder = mx::cpu::get_command_encoder(stream());
    for (const mx::array &input : inputs) {
        encoder.set_input_array(input);
    }
    encoder.set_output_array(out);

    const int batch = inputs[0].shape(0);
    const int num_queries = inputs[0].shape(2);
    const int head_dim = inputs[0].shape(3);
    const int page_size = inputs[1].shape(2);
    const int table_width = inputs[3].shape(1);
    encoder.dispatch([query = inputs[0].data<float>(), key_pages = inputs[1].data<float>(),
                      value_pages = inputs[2].data<float>(), block_table = inputs[3].data<int32_t>(),
                      context_lens = inputs[4].data<int32_t>(), output = out.data<float>(), batch, num_queries,
                      head_dim, page_size, table_width, scale = scale_, causal = is_causal_, num_heads = num_heads_,
                      num_kv_heads = num_kv_heads_]() {
        const int group = num_heads / num_kv_heads;
        std::vector<float> accumulated(head_dim);
        for (int request_idx = 0; request_idx < batch; ++request_idx) {
            const int context_len = context_lens[request_idx];
            for (int head_idx = 0; head_idx < num_heads; ++head_idx) {
                const int kv_head_idx = head_idx / group;
                for (int query_idx = 0; query_idx < num_queries; ++query_idx) {
                    const size_t row = (static_cast<size_t>(request_idx) * num_heads + head_idx) * num_queries + query_idx;
                    const float *query_row = query + row * head_dim;
                    const int visible = causal ? context_len - num_queries + query_idx + 1 : context_len;
                    float running_max = -std::numeric_limits<float>::infinity();
                    float denominator = 0.0f;
                    std::fill(accumulated.begin(), accumulated.end(), 0.0f);
                    for (int position = 0; position < visible; ++position) {
                        const int page_id = block_table[request_idx * table_width + position / page_size];
                        const int slot_idx = position % page_size;
                        const size_t kv_offset =
                            ((static_cast<size_t>(page_id) * num_kv_heads + kv_head_idx) * page_size + slot_idx) *
                            head_dim;
                        float score = 0.0f;
                        for (int dim_idx = 0; dim_idx < head_dim; ++dim_idx) {
                            score += query_row[dim_idx] * key_pages[kv_offset + dim_idx];
                        }
                        score *= scale;
                        const float new_max = std::max(running_max, score);
                        const float correction = std::exp(running_max - new_max);
                        const float weight = std::exp(score - new_max);
                        denominator = denominator * correction + weight;
                        for (int dim_idx = 0; dim_idx < head_dim; ++dim_idx) {
                            accumulated[dim_idx] =
                                accumulated[dim_idx] * correction + weight * value_pages[kv_offset + dim_idx];
                        }
                        running_max = new_max;
                    }
                    float *output_row = output + row * head_dim;
                    for (int dim_idx = 0; dim_idx < head_dim; ++dim_idx) {
                        output_row[dim_idx] = denominator > 0.0f ? accumulated[dim_idx] / denominator : 0.0f;
                    }
                }
            }
        }
    });
}

void PagedAttention::eval_gpu(const std::vector<mx::array> &, std::vector<mx::array> &) {
    checkpoint_todo("PagedAttention::eval_gpu", "Week 3, Day 4");
}

}  // namespace tiny_llm_ext
