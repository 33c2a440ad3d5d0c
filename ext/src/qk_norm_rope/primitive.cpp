#include "qk_norm_rope/primitive.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>

#include "common/buffer_views.h"
#include "common/cpu_eval.h"
#include "common/dtype_dispatch.h"
#include "common/lazy_cuda_kernel.h"

namespace pagecheck {

namespace mx = mlx::core;

namespace {

constexpr int kThreadsPerBlock = 128;
constexpr int kLanes = 32;

LazyCudaKernel kQkNormRope{"qk_norm_rope", "qk_norm_rope", {"qkv", "q_norm", "k_norm", "offsets"}, {"out"}};

// A float's bit pattern as the int template argument the kernel reads back with __int_as_float.
int float_bits(float value) {
  int bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

struct QkvShape {
  int batch;
  int length;
  int num_q_heads;
  int num_kv_heads;
  int head_dim;
};

// The same arithmetic as ext/kernels/qk_norm_rope.cu, one (b, l, head) row at
// a time: float32 throughout, one rounding to T per output.
template <typename T>
void qk_norm_rope_cpu(const QkvShape& s, float eps, float rope_base, const T* qkv, const T* q_norm, const T* k_norm,
                      const int32_t* offsets, T* out) {
  const int row_heads = s.num_q_heads + 2 * s.num_kv_heads;
  const int half = s.head_dim / 2;
  const float log2_base = std::log2(rope_base);
  const int64_t q_elems = static_cast<int64_t>(s.batch) * s.num_q_heads * s.length * s.head_dim;
  const int64_t kv_elems = static_cast<int64_t>(s.batch) * s.num_kv_heads * s.length * s.head_dim;
  for (int b = 0; b < s.batch; ++b) {
    for (int pos = 0; pos < s.length; ++pos) {
      const float position = static_cast<float>(offsets[b] + pos);
      for (int head = 0; head < row_heads; ++head) {
        const T* x = qkv + ((static_cast<int64_t>(b) * s.length + pos) * row_heads + head) * s.head_dim;
        int64_t region = 0;
        int region_head = head;
        int region_heads = s.num_q_heads;
        const T* weight = q_norm;
        if (head >= s.num_q_heads + s.num_kv_heads) {
          region = q_elems + kv_elems;
          region_head = head - s.num_q_heads - s.num_kv_heads;
          region_heads = s.num_kv_heads;
          weight = nullptr;
        } else if (head >= s.num_q_heads) {
          region = q_elems;
          region_head = head - s.num_q_heads;
          region_heads = s.num_kv_heads;
          weight = k_norm;
        }
        T* y = out + region + ((static_cast<int64_t>(b) * region_heads + region_head) * s.length + pos) * s.head_dim;
        if (weight == nullptr) {
          for (int i = 0; i < s.head_dim; ++i) {
            y[i] = x[i];
          }
          continue;
        }
        float sum_sq = 0.0f;
        for (int i = 0; i < s.head_dim; ++i) {
          const float v = static_cast<float>(x[i]);
          sum_sq += v * v;
        }
        const float inv_rms = 1.0f / std::sqrt(sum_sq / static_cast<float>(s.head_dim) + eps);
        for (int i = 0; i < half; ++i) {
          const float a = static_cast<float>(x[i]) * inv_rms * static_cast<float>(weight[i]);
          const float c = static_cast<float>(x[i + half]) * inv_rms * static_cast<float>(weight[i + half]);
          const float inv_freq = std::exp2(-static_cast<float>(i) / static_cast<float>(half) * log2_base);
          const float theta = position * inv_freq;
          const float cos_theta = std::cos(theta);
          const float sin_theta = std::sin(theta);
          y[i] = static_cast<T>(a * cos_theta - c * sin_theta);
          y[i + half] = static_cast<T>(a * sin_theta + c * cos_theta);
        }
      }
    }
  }
}

// outputs[0..2] (q, k, v) as row-contiguous views of outputs[3], one after another.
void view_regions(std::vector<mx::array>& outputs) {
  int64_t offset = 0;
  for (int i = 0; i < 3; ++i) {
    view_row_contiguous(outputs[3], offset, outputs[i]);
    offset += static_cast<int64_t>(outputs[i].size());
  }
}

} // namespace

void QkNormRope::eval_cpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  mx::array& out = outputs[3];
  const mx::array& qkv = inputs[0];
  const int row_heads = num_q_heads_ + 2 * num_kv_heads_;
  const QkvShape shape{qkv.shape(0), qkv.shape(1), num_q_heads_, num_kv_heads_, qkv.shape(2) / row_heads};
  auto& encoder = begin_cpu_eval("QkNormRope", inputs, out, stream());
  dispatch_storage_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    encoder.dispatch([shape, eps = eps_, base = rope_base_, arrays = task_arrays(inputs, out)]() mutable {
      qk_norm_rope_cpu<T>(shape, eps, base, arrays[0].data<T>(), arrays[1].data<T>(), arrays[2].data<T>(),
                          arrays[3].data<int32_t>(), arrays[4].data<T>());
    });
  });
  view_regions(outputs);
}

// One warp per (b, l, head) row of qkv (the op keeps rows x 32 within int), into the buffer. The kernel
// writes every element of it (each row's warp all HEAD_DIM of its head: ext/kernels/qk_norm_rope.cu), so the
// buffer is not filled first: a fill is a node of its own, about 5.5 us of MLX's submit a call on the H200
// (pagecheck.gpu.node_cost).
void QkNormRope::eval_gpu(const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs) {
  const mx::array& qkv = inputs[0];
  const int row_heads = num_q_heads_ + 2 * num_kv_heads_;
  const int64_t rows = static_cast<int64_t>(qkv.shape(0)) * qkv.shape(1) * row_heads;
  kQkNormRope.run(
      inputs, {outputs[3]}, std::make_tuple(static_cast<int>(std::max<int64_t>(rows, 1) * kLanes), 1, 1),
      std::make_tuple(kThreadsPerBlock, 1, 1),
      {{"T", qkv.dtype()},
       {"HEAD_DIM", qkv.shape(2) / row_heads},
       {"NUM_Q_HEADS", num_q_heads_},
       {"NUM_KV_HEADS", num_kv_heads_},
       {"EPS_BITS", float_bits(eps_)},
       {"LOG2_BASE_BITS", float_bits(std::log2(rope_base_))}},
      std::nullopt, stream());
  view_regions(outputs);
}

bool QkNormRope::is_equivalent(const mx::Primitive& other) const {
  const auto* that = dynamic_cast<const QkNormRope*>(&other);
  return that != nullptr && num_q_heads_ == that->num_q_heads_ && num_kv_heads_ == that->num_kv_heads_ &&
      eps_ == that->eps_ && rope_base_ == that->rope_base_;
}

std::vector<mx::Shape> QkNormRope::output_shapes(const std::vector<mx::array>& inputs) {
  const mx::array& qkv = inputs[0];
  const int batch = qkv.shape(0);
  const int length = qkv.shape(1);
  const int head_dim = qkv.shape(2) / (num_q_heads_ + 2 * num_kv_heads_);
  return {{batch, num_q_heads_, length, head_dim},
          {batch, num_kv_heads_, length, head_dim},
          {batch, num_kv_heads_, length, head_dim},
          {static_cast<int>(qkv.size())}};
}

} // namespace pagecheck
