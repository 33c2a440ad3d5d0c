// Kernel body of qk_norm_rope (MLX's cuda_kernel writes the signature: inputs
// qkv, q_norm, k_norm, offsets; output out; template arguments T, HEAD_DIM,
// NUM_Q_HEADS, NUM_KV_HEADS, EPS_BITS, LOG2_BASE_BITS: the float32 bit
// patterns of eps and log2(rope base)). Grid: one warp per (b, l, head) row of
// the stacked projection, heads in qkv order (NUM_Q_HEADS q heads, then
// NUM_KV_HEADS k heads, then NUM_KV_HEADS v heads).
//
// Ownership: the warp of row (b, l, h) reads qkv[b, l, h * HEAD_DIM ...] and
// writes that head's HEAD_DIM outputs into its region of `out`: q heads to
// [B, H_q, L, D] at offset 0, k heads to [B, H_kv, L, D] after the q region,
// v heads to [B, H_kv, L, D] after the k region. No two warps write the same
// element. Lane j handles the rotary pairs (i, i + HEAD_DIM / 2) for i = j,
// j + 32, ...: q and k rows are scaled by 1 / sqrt(mean(x^2) + eps) and their
// norm weight, then rotated by angle (offsets[b] + l) * base^(-i / (D / 2))
// (the non-traditional rotary layout); v rows are copied. All arithmetic is in
// float32, rounded to T once per output.
constexpr int HALF = HEAD_DIM / 2;
constexpr int ROW_HEADS = NUM_Q_HEADS + 2 * NUM_KV_HEADS;
constexpr int LANES = 32;

// Positions.
const int64_t row = static_cast<int64_t>(cg::this_grid().thread_rank()) / LANES;
const int lane = static_cast<int>(threadIdx.x % LANES);
const int batch = qkv_shape[0];
const int length = qkv_shape[1];
const int64_t num_rows = static_cast<int64_t>(batch) * length * ROW_HEADS;
if (row >= num_rows) {
  return;
}
const int head = static_cast<int>(row % ROW_HEADS);
const int64_t token = row / ROW_HEADS;
const int pos = static_cast<int>(token % length);
const int b = static_cast<int>(token / length);
const T* x = qkv + row * HEAD_DIM;

// This head's output rows: region, head index within the region, heads in the region.
const int64_t q_elems = static_cast<int64_t>(batch) * NUM_Q_HEADS * length * HEAD_DIM;
const int64_t kv_elems = static_cast<int64_t>(batch) * NUM_KV_HEADS * length * HEAD_DIM;
int64_t region = 0;
int region_head = head;
int region_heads = NUM_Q_HEADS;
const T* weight = q_norm;
if (head >= NUM_Q_HEADS + NUM_KV_HEADS) {
  region = q_elems + kv_elems;
  region_head = head - NUM_Q_HEADS - NUM_KV_HEADS;
  region_heads = NUM_KV_HEADS;
  weight = nullptr;
} else if (head >= NUM_Q_HEADS) {
  region = q_elems;
  region_head = head - NUM_Q_HEADS;
  region_heads = NUM_KV_HEADS;
  weight = k_norm;
}
T* y = out + region + ((static_cast<int64_t>(b) * region_heads + region_head) * length + pos) * HEAD_DIM;

// v rows: a copy into the head-major layout.
if (weight == nullptr) {
  for (int i = lane; i < HEAD_DIM; i += LANES) {
    y[i] = x[i];
  }
  return;
}

// The row's mean square, reduced across the warp.
float sum_sq = 0.0f;
for (int i = lane; i < HEAD_DIM; i += LANES) {
  const float v = static_cast<float>(x[i]);
  sum_sq = fmaf(v, v, sum_sq);
}
for (int shift = LANES / 2; shift > 0; shift /= 2) {
  sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, shift);
}
const float eps = __int_as_float(EPS_BITS);
const float log2_base = __int_as_float(LOG2_BASE_BITS);
const float inv_rms = rsqrtf(sum_sq / static_cast<float>(HEAD_DIM) + eps);
const float position = static_cast<float>(offsets[b] + pos);

// Normalise, weigh and rotate each pair.
for (int i = lane; i < HALF; i += LANES) {
  const float a = static_cast<float>(x[i]) * inv_rms * static_cast<float>(weight[i]);
  const float c = static_cast<float>(x[i + HALF]) * inv_rms * static_cast<float>(weight[i + HALF]);
  const float inv_freq = exp2f(-static_cast<float>(i) / static_cast<float>(HALF) * log2_base);
  float sin_theta;
  float cos_theta;
  sincosf(position * inv_freq, &sin_theta, &cos_theta);
  y[i] = static_cast<T>(a * cos_theta - c * sin_theta);
  y[i + HALF] = static_cast<T>(a * sin_theta + c * cos_theta);
}
