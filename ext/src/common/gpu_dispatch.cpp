#include "common/gpu_dispatch.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "common/buffer_views.h"
#include "common/gpu_plan.h"
#include "common/kernel_header_file.h"
#include "common/kernel_node.h"
#include "common/kernel_sources.h"
#include "common/nvrtc_compile.h"
#include "mlx/allocator.h"
#include "mlx/fast.h"
#include "mlx/primitives.h"

namespace pagecheck {

namespace mx = mlx::core;

namespace {

using TemplateArgs = KernelTemplateArgs;

// One kernel file: its argument names as the body uses them, and its headers.
struct KernelSpec {
  const char* stem;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::vector<const char*> headers;
};

// The softmax scale is no input: it is the template arguments SCALE_BITS and SCALE_NEGATIVE (scale_of in
// paged_common.cuh).
const std::vector<std::string> kPagedInputs{"query", "key_pages", "value_pages", "block_table", "context_lens"};
constexpr size_t kPagedInputCount = 5;

#ifdef __APPLE__
constexpr const char* kBodyExtension = ".metal";
const std::vector<const char*> kDecodeHeaders{
    "paged_common.metal.h", "paged_decode_walk.metal.h", "paged_decode_split_scratch.metal.h"};
const std::vector<const char*> kCommonHeaders{"paged_common.metal.h"};
const std::vector<const char*> kMmaHeaders{};
#else
constexpr const char* kBodyExtension = ".cu";
const std::vector<const char*> kDecodeHeaders{
    "paged_common.cuh", "paged_mma.cuh", "paged_bulk_copy.cuh", "paged_decode_merge.cuh", "paged_decode_walk.cuh",
    "paged_decode_mma_walk.cuh", "paged_decode_walker.cuh", "paged_decode_split_scratch.cuh"};
const std::vector<const char*> kCommonHeaders{"paged_common.cuh"};
const std::vector<const char*> kMmaHeaders{"paged_common.cuh", "paged_mma.cuh"};
#endif

const KernelSpec kDecode{"paged_decode", kPagedInputs, {"out"}, kDecodeHeaders};
const KernelSpec kDecodeSplit{"paged_decode_split", kPagedInputs, {"scratch"}, kDecodeHeaders};
const KernelSpec kPrefill{"paged_prefill", kPagedInputs, {"out"}, kCommonHeaders};
const KernelSpec kPrefillMma{"paged_prefill_mma", kPagedInputs, {"out"}, kMmaHeaders};
const std::vector<const char*> kWgmmaHeaders{"paged_common.cuh", "paged_mma.cuh", "paged_bulk_copy.cuh",
                                             "paged_wgmma.cuh"};

// Set when a warpgroup kernel failed to compile: prefills take paged_prefill_mma from then on.
std::atomic<bool> wgmma_failed{false};

// The kernel object of one file and shared-memory size, created on first use.
// MLX caches compiled kernels by name, so the name carries the sources' digest.
// Header and body are compacted (compact_kernel_source): MLX copies the whole
// source into every call's node, so its length is paid on every call. On
// CUDA the header, nine tenths of it, is a file NVRTC includes where it can
// (header_for_mlx).
mx::fast::CustomKernelFunction& kernel_for(const KernelSpec& spec, int shared_bytes) {
  static std::mutex mutex;
  static std::map<std::string, mx::fast::CustomKernelFunction> kernels;
  const std::string key = std::string(spec.stem) + ":" + std::to_string(shared_bytes);
  std::lock_guard<std::mutex> lock(mutex);
  auto it = kernels.find(key);
  if (it != kernels.end()) {
    return it->second;
  }
  std::string header;
  for (const char* name : spec.headers) {
    header += kernel_file(name) + "\n";
  }
  header = compact_kernel_source(header);
#ifndef __APPLE__
  header = header_for_mlx(spec.stem, header);
#endif
  const std::string body = compact_kernel_source(kernel_file(std::string(spec.stem) + kBodyExtension));
  const std::string name = std::string("pagecheck_") + spec.stem + "_" + kernel_sources_digest();
  try {
#ifdef __APPLE__
    auto kernel = mx::fast::metal_kernel(name, spec.inputs, spec.outputs, body, header, true, false);
#else
    auto kernel = mx::fast::cuda_kernel(name, spec.inputs, spec.outputs, body, header, true, shared_bytes);
#endif
    return kernels.emplace(key, std::move(kernel)).first->second;
  } catch (const std::exception& error) {
    throw std::runtime_error(
        std::string("pagecheck: the GPU attention kernels need MLX's ") +
#ifdef __APPLE__
        "Metal" +
#else
        "CUDA back-end (mlx[cuda13])" +
#endif
        std::string(", and this libmlx could not create one (") + error.what() + "); run on the CPU stream");
  }
}

// Runs one kernel into `outputs` now. fast::cuda_kernel returns lazy arrays;
// their primitive is evaluated straight into this primitive's outputs, with
// this primitive's inputs, which are already computed. It is made per call
// unless PAGECHECK_REUSE_KERNEL_NODES asks to keep it (kernel_node.h): the key
// holds everything the primitive keeps (kernel, shared memory, grid, template
// arguments, fill, stream). `fill` fills the outputs first (MLX's fill, a node
// of its own: about 5.5 us of submit a call on the H200); without it they
// hold whatever their buffers held.
void run_kernel(
    const KernelSpec& spec,
    int shared_bytes,
    const std::vector<mx::array>& inputs,
    std::vector<mx::array> outputs,
    std::tuple<int, int, int> grid,
    const TemplateArgs& template_args,
    std::optional<float> fill,
    mx::Stream stream) {
  std::vector<mx::Shape> shapes;
  std::vector<mx::Dtype> dtypes;
  for (const mx::array& out : outputs) {
    shapes.push_back(out.shape());
    dtypes.push_back(out.dtype());
  }
  eval_kernel_node(
      [&] {
        return kernel_node_key(spec.stem, grid, {kGpuThreadsPerBlock, 1, 1}, shared_bytes, template_args, fill, {},
                               stream);
      },
      [&] {
        return kernel_for(spec, shared_bytes)(
            inputs, shapes, dtypes, grid, {kGpuThreadsPerBlock, 1, 1}, template_args, fill, false, stream);
      },
      inputs, outputs);
}

// The fill of the kernels that write every output element (the single-pass
// decode and the prefills; a context of 0 writes zeros): none on CUDA, where
// the kernel harness runs every schedule into NaN-poisoned outputs and finds
// every element written (ext/kernels/NOTES.md v23), so MLX's fill would be a
// node for nothing. The Metal mirrors keep it: they have never run.
#ifdef __APPLE__
const std::optional<float> kWholeOutputFill = 0.0f;
#else
const std::optional<float> kWholeOutputFill = std::nullopt;
#endif
// The split decode's scratch is zero-filled first: its arrival counters start from the fill's value.
constexpr float kSplitScratchFill = 0.0f;

// The split kernel writes the attention output into its scratch (one fill,
// one launch): the output array is a row-contiguous view of that region.
void view_split_output(const mx::array& scratch, int64_t out_begin_words, mx::array& out) {
  view_row_contiguous(scratch, out_begin_words * 4 / static_cast<int64_t>(out.itemsize()), out);
}

// The bit pattern of |value| (a non-negative int) and its sign: the template
// arguments SCALE_BITS and SCALE_NEGATIVE.
int magnitude_bits(float value) {
  int bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits & 0x7fffffff;
}

bool sign_bit(float value) {
  return std::signbit(value);
}

} // namespace

std::string prefill_wgmma_source(const std::string& name, const WgmmaVariant& variant) {
  const std::string type = variant.dtype == mx::bfloat16 ? "__nv_bfloat16" : "__half";
  std::string source =
      "#include <cuda_bf16.h>\n#include <cuda_fp16.h>\n#include <cuda/std/limits>\n#include <cuda/std/cstdint>\n"
      "using cuda::std::int32_t;\n";
  for (const char* header : kWgmmaHeaders) {
    source += kernel_file(header) + "\n";
  }
  source += "extern \"C\" __global__ void __launch_bounds__(" +
      std::to_string(kGpuWarpgroupThreads * (variant.warpgroups + (variant.producer_registers > 0 ? 1 : 0))) +
      ", 1) " +
      name + "(const " + type + "* query, const " + type + "* key_pages, const " + type +
      "* value_pages, const int32_t* block_table, const int32_t* context_lens, " + type +
      "* out, int batch, int num_q_heads, int num_queries, int head_dim, int num_pages, int num_kv_heads, "
      "int page_size, int max_pages) {\n";
  source += "using T = " + type + ";\n";
  const std::pair<const char*, int> ints[] = {
      {"HEAD_DIM", variant.head_dim}, {"KEY_TILE", variant.key_tile}, {"STAGES", variant.stages},
      {"WARPGROUPS", variant.warpgroups}, {"TABLE", variant.table}, {"SCALE_BITS", variant.scale_bits},
      {"PRODUCER_REGISTERS", variant.producer_registers}};
  for (const auto& [key, value] : ints) {
    source += std::string("constexpr int ") + key + " = " + std::to_string(value) + ";\n";
  }
  source += std::string("constexpr bool CAUSAL = ") + (variant.causal ? "true" : "false") + ";\n";
  source += std::string("constexpr bool SCALE_NEGATIVE = ") + (variant.scale_negative ? "true" : "false") + ";\n";
  source += kernel_file("paged_prefill_wgmma.cu") + "\n}\n";
  return source;
}

std::string prefill_wgmma_name(const WgmmaVariant& v) {
  if (!gpu_takes_warpgroup_mma(v.dtype, v.head_dim) || (v.key_tile != 64 && v.key_tile != 128) || v.stages < 2 ||
      v.warpgroups < 1 || v.warpgroups > 3 || v.table < 0 || v.table > 2 || v.scale_bits < 0 ||
      (v.producer_registers != 0 &&
       (v.producer_registers < 24 || v.producer_registers > 256 || v.producer_registers % 8 != 0))) {
    throw std::invalid_argument("pagecheck: no warpgroup prefill variant for these parameters");
  }
  char scale_text[16];
  std::snprintf(scale_text, sizeof(scale_text), "%08x", static_cast<unsigned>(v.scale_bits));
  // The digest keeps a kernel of an older build from being taken for this one's by MLX's module cache.
  return std::string("pagecheck_paged_prefill_wgmma_") + kernel_sources_digest() + "_" +
      (v.dtype == mx::bfloat16 ? "bf16" : "f16") + "_d" + std::to_string(v.head_dim) + "_k" +
      std::to_string(v.key_tile) + "_s" + std::to_string(v.stages) + "_w" + std::to_string(v.warpgroups) +
      (v.causal ? "_causal" : "_full") + "_t" + std::to_string(v.table) + (v.scale_negative ? "_minus" : "_plus") +
      scale_text + (v.producer_registers > 0 ? "_p" + std::to_string(v.producer_registers) : std::string());
}

std::string wgmma_image_format() {
  const char* asked = std::getenv("PAGECHECK_WGMMA_IMAGE");
  const std::string format = asked == nullptr || *asked == '\0' ? "cubin" : asked;
  if (format != "cubin" && format != "ptx") {
    throw std::invalid_argument("pagecheck: PAGECHECK_WGMMA_IMAGE='" + format + "' must be cubin or ptx");
  }
  return format;
}

const WgmmaKernel& prefill_wgmma_kernel(const WgmmaVariant& variant) {
  static std::mutex mutex;
  static std::map<std::string, WgmmaKernel> kernels;
  const std::string name = prefill_wgmma_name(variant);
  std::lock_guard<std::mutex> lock(mutex);
  auto it = kernels.find(name);
  if (it != kernels.end()) {
    return it->second;
  }
  const std::string source = prefill_wgmma_source(name, variant);
  WgmmaKernel kernel{name, {}, {}};
  if (wgmma_image_format() == "cubin") {
    try {
      kernel.image = compile_cubin(source, name + ".cu", "sm_90a");
      kernel.format = "cubin";
    } catch (const std::exception&) {
      // An NVRTC without nvrtcGetCUBIN: the PTX below. A source error fails there again, with its log.
    }
  }
  if (kernel.image.empty()) {
    kernel.image = compile_ptx(source, name + ".cu", "compute_90a");
    kernel.format = "ptx";
  }
  return kernels.emplace(name, std::move(kernel)).first->second;
}

GpuCaps gpu_caps(const mx::Device& device) {
  GpuCaps caps;
#ifndef __APPLE__
  caps.tensor_cores = true;
  if (device.type != mx::Device::gpu || wgmma_failed.load(std::memory_order_relaxed)) {
    return caps;
  }
  static std::mutex mutex;
  static std::map<int, bool> hopper;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = hopper.find(device.index);
  if (it == hopper.end()) {
    bool is_hopper = false;
    try {
      const auto& info = mx::device_info(device);
      const auto major = info.find("compute_capability_major");
      const auto minor = info.find("compute_capability_minor");
      is_hopper = major != info.end() && minor != info.end() && std::holds_alternative<size_t>(major->second) &&
          std::holds_alternative<size_t>(minor->second) && std::get<size_t>(major->second) == 9 &&
          std::get<size_t>(minor->second) == 0;
    } catch (const std::exception&) {
      is_hopper = false;
    }
    it = hopper.emplace(device.index, is_hopper).first;
  }
  caps.warpgroup_mma = it->second;
#else
  (void)device;
#endif
  return caps;
}

void eval_attention_gpu(
    const AttentionShape& shape,
    GpuTable table,
    const std::vector<mx::array>& inputs,
    std::vector<mx::array>& outputs,
    mx::Stream stream) {
  check_gpu_shape(shape);
  const mx::Dtype dtype = inputs[0].dtype();
  GpuPlan plan = plan_gpu_call(shape, dtype, gpu_caps(stream.device));
  const WgmmaKernel* wgmma = nullptr;
  if (plan.schedule == GpuSchedule::kPrefillWgmma) {
    try {
      wgmma = &prefill_wgmma_kernel({dtype, shape.head_dim, plan.key_tile, plan.mma_stages, plan.warpgroups,
                                     shape.causal, static_cast<int>(table), magnitude_bits(shape.scale),
                                     sign_bit(shape.scale), plan.producer_registers});
    } catch (const std::exception& error) {
      if (!wgmma_failed.exchange(true)) {
        std::fprintf(stderr, "pagecheck: the warpgroup prefill kernel did not compile, so prefills run "
                             "paged_prefill_mma from now on: %s\n", error.what());
      }
      plan = plan_gpu_call(shape, dtype, gpu_caps(stream.device));
    }
  }
  if (outputs.size() != 2 || static_cast<int64_t>(outputs[1].size()) != plan.scratch_words) {
    throw std::logic_error("pagecheck: GPU outputs do not match the launch plan");
  }
  if (plan.scratch_words == 0) {
    outputs[1].set_data(mx::allocator::malloc(0));
  }
  if (outputs[0].size() == 0) {
    outputs[0].set_data(mx::allocator::malloc(0));
    return;
  }
  const std::vector<mx::array> paged_inputs(inputs.begin(), inputs.begin() + kPagedInputCount);
  const int grid_x = static_cast<int>(plan.blocks * plan.threads);
  const int table_kind = static_cast<int>(table);
  const TemplateArgs decode_args{
      {"T", dtype},
      {"HEAD_DIM", shape.head_dim},
      {"ROWS", plan.rows},
      {"CAUSAL", shape.causal},
      {"MMA", plan.tensor_cores},
      {"MMA_STAGES", plan.mma_stages},
      // False for the op, which pins nothing: bulk copies measured no faster
      // than the cp.async ring (ext/kernels/NOTES.md).
      {"MMA_BULK", plan.bulk},
      {"MMA_SWIZZLE", plan.swizzled_rows},
      {"TABLE", table_kind},
      {"SCALE_BITS", magnitude_bits(shape.scale)},
      {"SCALE_NEGATIVE", sign_bit(shape.scale)}};
  switch (plan.schedule) {
    case GpuSchedule::kDecode:
      run_kernel(kDecode, plan.shared_bytes, paged_inputs, {outputs[0]}, {grid_x, 1, 1}, decode_args,
                 kWholeOutputFill, stream);
      return;
    case GpuSchedule::kSplitDecode:
      run_kernel(kDecodeSplit, plan.shared_bytes, paged_inputs, {outputs[1]}, {grid_x, plan.splits, 1}, decode_args,
                 kSplitScratchFill, stream);
      view_split_output(outputs[1], plan.out_begin_words, outputs[0]);
      return;
    case GpuSchedule::kPrefillMma:
      run_kernel(kPrefillMma, plan.shared_bytes, paged_inputs, {outputs[0]}, {grid_x, 1, 1},
                 {{"T", dtype},
                  {"HEAD_DIM", shape.head_dim},
                  {"KEY_TILE", plan.key_tile},
                  {"CAUSAL", shape.causal},
                  {"TABLE", table_kind},
                  {"SCALE_BITS", magnitude_bits(shape.scale)},
                  {"SCALE_NEGATIVE", sign_bit(shape.scale)}},
                 kWholeOutputFill, stream);
      return;
    case GpuSchedule::kPrefillWgmma: {
      // The geometry the other kernels read from their inputs' shapes, as ints.
      const std::vector<mx::fast::ScalarArg> geometry{
          static_cast<int>(inputs[0].shape(0)), static_cast<int>(inputs[0].shape(1)),
          static_cast<int>(inputs[0].shape(2)), static_cast<int>(inputs[0].shape(3)),
          static_cast<int>(inputs[1].shape(0)), static_cast<int>(inputs[1].shape(1)),
          static_cast<int>(inputs[1].shape(2)), static_cast<int>(inputs[3].shape(1))};
      std::vector<mx::array> out{outputs[0]};
      eval_kernel_node(
          [&] {
            return kernel_node_key(wgmma->name, {grid_x, 1, 1}, {plan.threads, 1, 1}, plan.shared_bytes, {},
                                   kWholeOutputFill, geometry, stream);
          },
          [&] {
            return mx::fast::precompiled_cuda_kernel(
                wgmma->name, wgmma->image, paged_inputs, {outputs[0].shape()}, {dtype}, geometry, {grid_x, 1, 1},
                {plan.threads, 1, 1}, plan.shared_bytes, kWholeOutputFill, true, stream);
          },
          paged_inputs, out);
      return;
    }
    case GpuSchedule::kPrefill:
      run_kernel(kPrefill, plan.shared_bytes, paged_inputs, {outputs[0]}, {grid_x, 1, 1},
                 {{"T", dtype},
                  {"HEAD_DIM", shape.head_dim},
                  {"CAUSAL", shape.causal},
                  {"TABLE", table_kind},
                  {"SCALE_BITS", magnitude_bits(shape.scale)},
                  {"SCALE_NEGATIVE", sign_bit(shape.scale)}},
                 kWholeOutputFill, stream);
      return;
  }
  throw std::logic_error("pagecheck: unknown GPU schedule");
}

} // namespace pagecheck
