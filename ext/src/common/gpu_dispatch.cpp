#include "common/gpu_dispatch.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

#include "common/gpu_plan.h"
#include "common/kernel_sources.h"
#include "mlx/allocator.h"
#include "mlx/fast.h"
#include "mlx/primitives.h"

namespace pagecheck {

namespace mx = mlx::core;

namespace {

using TemplateArgs = std::vector<std::pair<std::string, mx::fast::TemplateArg>>;

// One kernel file: its argument names as the body uses them, and its headers.
struct KernelSpec {
  const char* stem;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::vector<const char*> headers;
};

// The softmax scale is no input: it is the template argument SCALE_BITS.
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

// The kernel functions of one file and shared-memory size, created on first use.
//
// `full` carries the file's source: MLX compiles it the first time a variant
// (a set of template arguments) runs, and keeps the compiled module for the
// life of the process under a name made of the kernel name and the template
// arguments (its JIT module cache, never evicted in MLX 0.32). Every call of
// a kernel function also rebuilds that source text (~70 KB of headers and
// body) into the graph node, a cost paid on the host per call. So once a
// variant has run, `reused` runs it instead: the same name, inputs and
// outputs, and a source that is only an #error line plus the names of the
// shape arguments the body reads (so MLX passes the same arguments). MLX finds
// the compiled module by name and never compiles that source; if it ever had
// to, the #error would fail the call loudly rather than produce a kernel.
struct KernelFunctions {
  mx::fast::CustomKernelFunction full;
  mx::fast::CustomKernelFunction reused;
  std::set<std::string> compiled_variants;
};

// The body's mentions of MLX's per-input shape arguments, which decide the
// kernel's signature (MLX looks for "<input>_shape", "_strides", "_ndim").
std::string reused_source(const KernelSpec& spec, const std::string& body) {
  std::string text = "#error \"pagecheck: this kernel runs only as compiled from its full source\"\n";
  for (const std::string& input : spec.inputs) {
    for (const char* suffix : {"_shape", "_strides", "_ndim"}) {
      if (body.find(input + suffix) != std::string::npos) {
        text += "// " + input + suffix + "\n";
      }
    }
  }
  return text;
}

KernelFunctions& kernel_for(const KernelSpec& spec, int shared_bytes) {
  static std::mutex mutex;
  static std::map<std::string, KernelFunctions> kernels;
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
  const std::string& body = kernel_file(std::string(spec.stem) + kBodyExtension);
  const std::string name = std::string("pagecheck_") + spec.stem + "_" + kernel_sources_digest();
  try {
#ifdef __APPLE__
    auto full = mx::fast::metal_kernel(name, spec.inputs, spec.outputs, body, header, true, false);
    auto reused = full;
#else
    auto full = mx::fast::cuda_kernel(name, spec.inputs, spec.outputs, body, header, true, shared_bytes);
    auto reused = mx::fast::cuda_kernel(name, spec.inputs, spec.outputs, reused_source(spec, body), "", true,
                                        shared_bytes);
#endif
    return kernels.emplace(key, KernelFunctions{std::move(full), std::move(reused), {}}).first->second;
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

// The template arguments as text: which variant of a kernel file a call runs.
std::string variant_text(const TemplateArgs& template_args) {
  std::string text;
  for (const auto& [name, value] : template_args) {
    text += name;
    text += '=';
    if (const int* number = std::get_if<int>(&value)) {
      text += std::to_string(*number);
    } else if (const bool* flag = std::get_if<bool>(&value)) {
      text += *flag ? "t" : "f";
    } else {
      text += std::to_string(static_cast<int>(std::get<mx::Dtype>(value).val()));
    }
    text += ';';
  }
  return text;
}

// Runs one kernel into `outputs` now. fast::cuda_kernel returns lazy arrays;
// their primitive is evaluated straight into this primitive's outputs, with
// this primitive's inputs, which are already computed. (Reusing that
// primitive across calls, to skip making it each time, segfaulted on the
// H200 once the lazy arrays were gone: it is made per call.)
// The outputs are zero-filled first: that is what gives them device memory
// (without an initial value the custom kernel allocates managed memory, and
// recycling a device buffer as managed costs a synchronizing copy per call).
void run_kernel(
    const KernelSpec& spec,
    int shared_bytes,
    const std::vector<mx::array>& inputs,
    std::vector<mx::array> outputs,
    std::tuple<int, int, int> grid,
    const TemplateArgs& template_args,
    mx::Stream stream) {
  std::vector<mx::Shape> shapes;
  std::vector<mx::Dtype> dtypes;
  for (const mx::array& out : outputs) {
    shapes.push_back(out.shape());
    dtypes.push_back(out.dtype());
  }
  KernelFunctions& kernels = kernel_for(spec, shared_bytes);
  const std::string variant = variant_text(template_args);
  static std::mutex compiled_mutex;
  bool compiled = false;
  {
    std::lock_guard<std::mutex> lock(compiled_mutex);
    compiled = kernels.compiled_variants.count(variant) > 0;
  }
  const mx::fast::CustomKernelFunction& function = compiled ? kernels.reused : kernels.full;
  std::vector<mx::array> lazy =
      function(inputs, shapes, dtypes, grid, {kGpuThreadsPerBlock, 1, 1}, template_args, 0.0f, false, stream);
  lazy[0].primitive().eval_gpu(lazy[0].inputs(), outputs);
  if (!compiled) {
    std::lock_guard<std::mutex> lock(compiled_mutex);
    kernels.compiled_variants.insert(variant);
  }
}

// The split kernel writes the attention output into its scratch (one fill,
// one launch): the output array is a row-contiguous view of that region.
void view_split_output(const mx::array& scratch, int64_t out_begin_words, mx::array& out) {
  mx::Strides strides(out.ndim(), 1);
  for (int axis = static_cast<int>(out.ndim()) - 2; axis >= 0; --axis) {
    strides[axis] = strides[axis + 1] * out.shape(axis + 1);
  }
  mx::array::Flags flags;
  flags.contiguous = true;
  flags.row_contiguous = true;
  const auto longest = std::max_element(out.shape().begin(), out.shape().end());
  flags.col_contiguous = out.size() <= 1 || static_cast<int64_t>(out.size()) == *longest;
  const int64_t offset = out_begin_words * 4 / static_cast<int64_t>(out.itemsize());
  out.copy_shared_buffer(scratch, strides, flags, out.size(), offset);
}

int float_bits(float value) {
  int bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

} // namespace

bool gpu_has_tensor_cores() {
#ifdef __APPLE__
  return false;
#else
  return true;
#endif
}

void eval_attention_gpu(
    const AttentionShape& shape,
    GpuTable table,
    const std::vector<mx::array>& inputs,
    std::vector<mx::array>& outputs,
    mx::Stream stream) {
  check_gpu_shape(shape);
  const mx::Dtype dtype = inputs[0].dtype();
  const GpuPlan plan = plan_gpu_call(shape, dtype, gpu_has_tensor_cores());
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
  const int grid_x = static_cast<int>(plan.blocks * kGpuThreadsPerBlock);
  const int table_kind = static_cast<int>(table);
  const TemplateArgs decode_args{
      {"T", dtype},
      {"HEAD_DIM", shape.head_dim},
      {"ROWS", plan.rows},
      {"CAUSAL", shape.causal},
      {"MMA", plan.tensor_cores},
      {"MMA_STAGES", plan.mma_stages},
      // The op keeps the cp.async ring: bulk copies measured no faster (ext/kernels/NOTES.md, v7).
      {"MMA_BULK", false},
      {"MMA_SWIZZLE", plan.swizzled_rows},
      {"TABLE", table_kind},
      {"SCALE_BITS", float_bits(shape.scale)}};
  switch (plan.schedule) {
    case GpuSchedule::kDecode:
      run_kernel(kDecode, plan.shared_bytes, paged_inputs, {outputs[0]}, {grid_x, 1, 1}, decode_args, stream);
      return;
    case GpuSchedule::kSplitDecode:
      run_kernel(kDecodeSplit, plan.shared_bytes, paged_inputs, {outputs[1]}, {grid_x, plan.splits, 1}, decode_args,
                 stream);
      view_split_output(outputs[1], plan.out_begin_words, outputs[0]);
      return;
    case GpuSchedule::kPrefillMma:
      run_kernel(kPrefillMma, plan.shared_bytes, paged_inputs, {outputs[0]}, {grid_x, 1, 1},
                 {{"T", dtype},
                  {"HEAD_DIM", shape.head_dim},
                  {"KEY_TILE", plan.key_tile},
                  {"CAUSAL", shape.causal},
                  {"TABLE", table_kind},
                  {"SCALE_BITS", float_bits(shape.scale)}},
                 stream);
      return;
    case GpuSchedule::kPrefill:
      run_kernel(kPrefill, plan.shared_bytes, paged_inputs, {outputs[0]}, {grid_x, 1, 1},
                 {{"T", dtype},
                  {"HEAD_DIM", shape.head_dim},
                  {"CAUSAL", shape.causal},
                  {"TABLE", table_kind},
                  {"SCALE_BITS", float_bits(shape.scale)}},
                 stream);
      return;
  }
  throw std::logic_error("pagecheck: unknown GPU schedule");
}

} // namespace pagecheck
