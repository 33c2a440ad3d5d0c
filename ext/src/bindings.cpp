// Python bindings of the pagecheck extension (module ext._ext).
// std::invalid_argument from the ops becomes ValueError (nanobind's default
// translation), raised at call time for shapes and dtypes and, on the CPU
// stream, for block-table, context and id values; values that are tracers
// under mx.compile are checked when the CPU task runs, and MLX raises that
// as RuntimeError at evaluation (common/ready_inputs.h).
#include <initializer_list>
#include <utility>

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/tuple.h>

#include "build_info.h"
#include "common/gpu_dispatch.h"
#include "common/gpu_plan.h"
#include "common/kernel_header_file.h"
#include "common/kernel_node.h"
#include "common/kernel_sources.h"
#include "dense_attention/dense_attention.h"
#include "paged_attention/paged_attention.h"
#include "paged_attention/validated_metadata.h"
#include "paged_attention/resident_lens.h"
#include "qk_norm_rope/qk_norm_rope.h"
#include "quantized_embedding/quantized_embedding.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

mlx::core::Dtype storage_dtype_named(const std::string& name) {
  if (name == "float32") {
    return mlx::core::float32;
  }
  if (name == "bfloat16") {
    return mlx::core::bfloat16;
  }
  if (name == "float16") {
    return mlx::core::float16;
  }
  throw std::invalid_argument("dtype = " + name + " must be float32, bfloat16 or float16");
}

// A dict of named values, in the order given.
nb::dict dict_of(std::initializer_list<std::pair<const char*, nb::object>> items) {
  nb::dict result;
  for (const auto& [name, value] : items) {
    result[name] = value;
  }
  return result;
}

// The arguments of one impl.paged_attention call, when the validation memo can
// answer for them: five MLX arrays, page_size an int (not a bool) in
// (0, 2^31), scale None or what the op's float argument accepts, mask None
// or "causal".
struct RememberableCall {
  mlx::core::array query, key_pages, value_pages, block_table, context_lens;
  int page_size;
  std::optional<float> scale;
  bool causal;
};

std::optional<RememberableCall> rememberable_call(
    nb::handle query, nb::handle key_pages, nb::handle value_pages, nb::handle block_table,
    nb::handle context_lens, nb::handle page_size, nb::handle scale, nb::handle mask) {
  for (nb::handle array : {query, key_pages, value_pages, block_table, context_lens}) {
    if (!nb::isinstance<mlx::core::array>(array)) {
      return std::nullopt;
    }
  }
  if (!PyLong_CheckExact(page_size.ptr())) {
    return std::nullopt;
  }
  int overflow = 0;
  const long long pages = PyLong_AsLongLongAndOverflow(page_size.ptr(), &overflow);
  if (overflow != 0 || pages <= 0 || pages >= (1LL << 31)) {
    return std::nullopt;
  }
  std::optional<float> scale_value;
  if (!scale.is_none()) {
    float value = 0.0f;
    if (!nb::try_cast<float>(scale, value)) {  // the conversion the op's scale argument makes
      return std::nullopt;
    }
    scale_value = value;
  }
  bool causal = false;
  if (!mask.is_none()) {
    if (!PyUnicode_Check(mask.ptr()) || PyUnicode_CompareWithASCIIString(mask.ptr(), "causal") != 0) {
      return std::nullopt;
    }
    causal = true;
  }
  return RememberableCall{nb::cast<mlx::core::array>(query), nb::cast<mlx::core::array>(key_pages),
                          nb::cast<mlx::core::array>(value_pages), nb::cast<mlx::core::array>(block_table),
                          nb::cast<mlx::core::array>(context_lens), static_cast<int>(pages), scale_value,
                          causal};
}

} // namespace

NB_MODULE(_ext, module) {
  module.doc() = "pagecheck C++ MLX extension: paged and dense attention, quantized embedding";

  module.def(
      "paged_attention",
      &pagecheck::paged_attention,
      "query"_a,
      "key_pages"_a,
      "value_pages"_a,
      "block_table"_a,
      "context_lens"_a,
      "page_size"_a,
      "scale"_a = nb::none(),
      "causal"_a = false,
      nb::kw_only(),
      "stream"_a = nb::none(),
      "Paged attention. query [B, Hq, L, D]; key_pages/value_pages [P, Hkv, page_size, D]; "
      "block_table int32 [B, max_pages] (-1 padded); context_lens int32 [B]. Returns [B, Hq, L, D] "
      "in the query dtype. With causal, queries are the last L positions of each context.");

  module.def(
      "paged_inputs_validated",
      [](const mlx::core::array& query, const mlx::core::array& key_pages, const mlx::core::array& value_pages,
         const mlx::core::array& block_table, const mlx::core::array& context_lens, int page_size, bool causal) {
        return pagecheck::metadata_validated(
            block_table, context_lens,
            pagecheck::paged_validation_key(query, key_pages, value_pages, page_size, causal));
      },
      "query"_a, "key_pages"_a, "value_pages"_a, "block_table"_a, "context_lens"_a, "page_size"_a, "causal"_a,
      "True when these very block_table and context_lens arrays were remembered as valid with inputs of "
      "these shapes and dtypes (ext/src/paged_attention/validated_metadata.h).");

  module.def(
      "validated_paged_attention",
      [](nb::handle query, nb::handle key_pages, nb::handle value_pages, nb::handle block_table,
         nb::handle context_lens, nb::handle page_size, nb::handle scale,
         nb::handle mask) -> std::optional<mlx::core::array> {
        const std::optional<RememberableCall> call =
            rememberable_call(query, key_pages, value_pages, block_table, context_lens, page_size, scale, mask);
        if (!call || call->block_table.dtype() != mlx::core::int32 ||
            call->context_lens.dtype() != mlx::core::int32 ||
            !pagecheck::metadata_validated(
                call->block_table, call->context_lens,
                pagecheck::paged_validation_key(call->query, call->key_pages, call->value_pages, call->page_size,
                                                call->causal))) {
          return std::nullopt;
        }
        return pagecheck::paged_attention(call->query, call->key_pages, call->value_pages, call->block_table,
                                          call->context_lens, call->page_size, call->scale, call->causal);
      },
      // Every argument may be None (nanobind refuses None for a handle without .none()): such a call is
      // answered None too, and the caller's checks name the argument.
      nb::arg("query").none(), nb::arg("key_pages").none(), nb::arg("value_pages").none(),
      nb::arg("block_table").none(), nb::arg("context_lens").none(), nb::arg("page_size").none(),
      nb::arg("scale").none() = nb::none(), nb::arg("mask").none() = nb::none(),
      "paged_attention with impl.paged_attention's arguments, for int32 metadata remembered as valid with "
      "inputs of these shapes and dtypes (paged_inputs_validated); None for any other call (an argument "
      "of another type, a mask other than None or \"causal\"), which the caller validates first. One "
      "call, with no Python in between, for the common case of a block table used again.");

  module.def(
      "remember_valid_paged_inputs",
      [](const mlx::core::array& query, const mlx::core::array& key_pages, const mlx::core::array& value_pages,
         const mlx::core::array& block_table, const mlx::core::array& context_lens, int page_size, bool causal) {
        pagecheck::remember_validated_metadata(
            block_table, context_lens,
            pagecheck::paged_validation_key(query, key_pages, value_pages, page_size, causal));
      },
      "query"_a, "key_pages"_a, "value_pages"_a, "block_table"_a, "context_lens"_a, "page_size"_a, "causal"_a,
      "Remember block_table and context_lens as valid for inputs of these shapes and dtypes; call only "
      "after validating them.");

  module.def("forget_validated_metadata", &pagecheck::forget_validated_metadata,
             "Forget every remembered (block_table, context_lens) pair.");
  module.def("validated_metadata_entries", &pagecheck::validated_metadata_entries,
             "How many (block_table, context_lens) pairs are remembered now.");

  module.def(
      "device_resident_lens",
      [](const mlx::core::array& context_lens, mlx::core::StreamOrDevice stream) {
        return pagecheck::device_resident_lens(context_lens, stream);
      },
      "context_lens"_a, "stream"_a = nb::none(),
      "The context lengths the op hands its GPU kernels: context_lens itself when it holds more than 8 "
      "bytes (or is a tracer), else its device copy, made once per array and remembered "
      "(ext/src/paged_attention/resident_lens.h).");
  module.def("forget_resident_lens", &pagecheck::forget_resident_lens,
             "Forget every remembered device copy of context lengths.");
  module.def("resident_lens_entries", &pagecheck::resident_lens_entries,
             "How many device copies of context lengths are remembered now.");

  module.def(
      "dense_attention",
      &pagecheck::dense_attention,
      "query"_a,
      "key"_a,
      "value"_a,
      "scale"_a = nb::none(),
      "causal"_a = false,
      "context_lens"_a = nb::none(),
      nb::kw_only(),
      "stream"_a = nb::none(),
      "Dense grouped-query attention. query [B, Hq, L, D]; key/value [B, Hkv, S, D]; optional "
      "context_lens int32 [B] (keys past it do not exist). Same mask rule as paged_attention.");

  module.def(
      "quantized_embedding",
      &pagecheck::quantized_embedding,
      "ids"_a,
      "weight"_a,
      "scales"_a,
      "biases"_a,
      "group_size"_a,
      "bits"_a,
      nb::kw_only(),
      "stream"_a = nb::none(),
      "Rows ids of an mx.quantize table (affine): ids int32 of any shape; weight uint32 [V, D * bits / 32]; "
      "scales/biases [V, D / group_size]. Returns ids.shape + [D] in the scales dtype, equal to "
      "mx.dequantize(weight, scales, biases)[ids], in one dispatch.");

  module.def(
      "qk_norm_rope",
      [](const mlx::core::array& qkv, const mlx::core::array& q_norm, const mlx::core::array& k_norm,
         const mlx::core::array& offsets, int num_q_heads, int num_kv_heads, float eps, float rope_base,
         mlx::core::StreamOrDevice stream) {
        std::vector<mlx::core::array> out =
            pagecheck::qk_norm_rope(qkv, q_norm, k_norm, offsets, num_q_heads, num_kv_heads, eps, rope_base, stream);
        return std::make_tuple(out[0], out[1], out[2]);
      },
      "qkv"_a,
      "q_norm"_a,
      "k_norm"_a,
      "offsets"_a,
      "num_q_heads"_a,
      "num_kv_heads"_a,
      "eps"_a,
      "rope_base"_a,
      nb::kw_only(),
      "stream"_a = nb::none(),
      "A Qwen3 layer's q/k norms and rotary embedding on its stacked projection, in one dispatch: qkv "
      "[B, L, (H_q + 2 H_kv) * D] (q, k, v heads in turn); q_norm, k_norm [D] in the qkv dtype; offsets int32 [B], "
      "each row's first position. Returns (q [B, H_q, L, D], k [B, H_kv, L, D], v [B, H_kv, L, D]): q and k equal "
      "mx.fast.rope(mx.fast.rms_norm(heads, weight, eps), D, traditional=False, base=rope_base, scale=1.0, "
      "offset=offsets), v the plain heads.");

  module.def("build_info", [] {
    const pagecheck::BuildInfo info = pagecheck::build_info();
    nb::dict result;
    result["kernel_flags"] = info.kernel_flags;
    result["march"] = info.march;
    result["compiler"] = info.compiler;
    result["build_type"] = info.build_type;
    result["mlx_version_built"] = info.mlx_version_built;
    result["mlx_version_runtime"] = info.mlx_version_runtime;
    result["num_threads"] = info.num_threads;
    return result;
  }, "How the extension was compiled: kernel flags, -march, compiler, MLX versions, CPU threads.");

  // The GPU launch plan, on any machine: the op's own (no pins), or one with
  // pins, which the Python launcher (pagecheck/gpu/kernels.py) runs.
  module.def(
      "gpu_launch_plan",
      [](int batch, int num_q_heads, int query_len, int head_dim, int num_kv_heads, int page_size,
         int pages_per_request, const std::string& dtype, const std::optional<std::string>& schedule,
         std::optional<int> splits, std::optional<bool> tensor_cores, std::optional<int> mma_stages, bool bulk,
         bool warpgroup_mma, std::optional<int> warpgroups, std::optional<int> producer_registers) {
        const mlx::core::Dtype storage = storage_dtype_named(dtype);
        if (batch < 1 || num_q_heads < 1 || query_len < 1 || head_dim < 1 || num_kv_heads < 1 || page_size < 1 ||
            pages_per_request < 0 || num_q_heads % num_kv_heads != 0) {
          throw std::invalid_argument("gpu_launch_plan: every size must be positive and H_q a multiple of H_kv");
        }
        pagecheck::AttentionShape shape;
        shape.batch = batch;
        shape.num_q_heads = num_q_heads;
        shape.num_kv_heads = num_kv_heads;
        shape.query_len = query_len;
        shape.head_dim = head_dim;
        shape.page_size = page_size;
        shape.pages_per_request = pages_per_request;
        pagecheck::check_gpu_shape(shape);
        pagecheck::GpuPlanPins pins;
        if (schedule) {
          pins.schedule = pagecheck::gpu_schedule_named(*schedule);
        }
        pins.splits = splits;
        pins.tensor_cores = tensor_cores;
        pins.mma_stages = mma_stages;
        pins.bulk = bulk;
        pins.warpgroups = warpgroups;
        pins.producer_registers = producer_registers;
        const pagecheck::GpuPlan plan =
            pagecheck::plan_gpu_call(shape, storage, pagecheck::GpuCaps{true, warpgroup_mma}, pins);
        return dict_of({{"schedule", nb::cast(std::string(pagecheck::gpu_schedule_name(plan.schedule)))},
                        {"mma", nb::cast(plan.tensor_cores)},
                        {"rows", nb::cast(plan.rows)},
                        {"blocks", nb::cast(plan.blocks)},
                        {"splits", nb::cast(plan.splits)},
                        {"shared_bytes", nb::cast(plan.shared_bytes)},
                        {"key_tile", nb::cast(plan.key_tile)},
                        {"threads", nb::cast(plan.threads)},
                        {"warpgroups", nb::cast(plan.warpgroups)},
                        {"producer_registers", nb::cast(plan.producer_registers)},
                        {"mma_stages", nb::cast(plan.mma_stages)},
                        {"bulk", nb::cast(plan.bulk)},
                        {"swizzled_rows", nb::cast(plan.swizzled_rows)},
                        {"scratch_words", nb::cast(plan.scratch_words)},
                        {"out_begin_words", nb::cast(plan.out_begin_words)}});
      },
      "batch"_a, "num_q_heads"_a, "query_len"_a, "head_dim"_a, "num_kv_heads"_a, "page_size"_a,
      "pages_per_request"_a, "dtype"_a, nb::kw_only(), "schedule"_a = nb::none(), "splits"_a = nb::none(),
      "tensor_cores"_a = nb::none(), "mma_stages"_a = nb::none(), "bulk"_a = false, "warpgroup_mma"_a = false,
      "warpgroups"_a = nb::none(), "producer_registers"_a = nb::none(),
      "The CUDA launch plan for this shape as a dict (schedule: the kernel's name; mma: the tensor-core "
      "walk or prefill; rows, blocks, threads (per block), splits, shared_bytes, key_tile, mma_stages (the "
      "ring depth of the tensor-core decode walk or of the warpgroup prefill), warpgroups (of the warpgroup "
      "prefill's blocks), producer_registers (its producer warpgroup's, 0 for none), bulk, swizzled_rows, scratch_words, out_begin_words), computed on any machine. "
      "warpgroup_mma says whether the device has Hopper's warpgroup MMA (pagecheck.ext.gpu_warpgroup_mma()); "
      "with no pins it is then the op's plan on that device. schedule, splits, tensor_cores, mma_stages and "
      "warpgroups (1..3, the warpgroup prefill's block height) and producer_registers (0, or a multiple of 8 "
      "in 24..256: a producer warpgroup that copies the tiles) fix those choices, bulk asks for bulk copies "
      "where the tensor-core decode walk runs. A pin out of range or "
      "at odds with the shape raises ValueError.");

  module.def(
      "gpu_warpgroup_mma",
      [] { return pagecheck::gpu_caps(mlx::core::Device(mlx::core::Device::gpu, 0)).warpgroup_mma; },
      "Whether GPU 0 has Hopper's warpgroup MMA (compute capability 9.0) and its kernels have compiled so far: "
      "where it does, the op's prefills run paged_prefill_wgmma.");

  // The warpgroup prefill's variants, named by the constants of paged_prefill_wgmma.cu.
  auto wgmma_variant = [](const std::string& dtype, int head_dim, int key_tile, int stages, int warpgroups,
                          bool causal, int table, int scale_bits, bool scale_negative, int producer_registers) {
    return pagecheck::WgmmaVariant{storage_dtype_named(dtype), head_dim, key_tile, stages, warpgroups, causal, table,
                                   scale_bits, scale_negative, producer_registers};
  };
  module.def(
      "gpu_prefill_wgmma_source",
      [wgmma_variant](const std::string& dtype, int head_dim, int key_tile, int stages, int warpgroups, bool causal,
                      int table, int scale_bits, bool scale_negative, int producer_registers) {
        const pagecheck::WgmmaVariant variant = wgmma_variant(
            dtype, head_dim, key_tile, stages, warpgroups, causal, table, scale_bits, scale_negative,
            producer_registers);
        const std::string name = pagecheck::prefill_wgmma_name(variant);
        return nb::make_tuple(name, pagecheck::prefill_wgmma_source(name, variant));
      },
      "dtype"_a, "head_dim"_a, "key_tile"_a, "stages"_a, "warpgroups"_a, "causal"_a, "table"_a, "scale_bits"_a,
      "scale_negative"_a, "producer_registers"_a = 0,
      "(name, source) of one variant of the warpgroup prefill: the whole translation unit the op hands NVRTC "
      "(compute_90a), on any machine, for compilers that check it without a GPU.");

  module.def(
      "gpu_prefill_wgmma_kernel",
      [wgmma_variant](const std::string& dtype, int head_dim, int key_tile, int stages, int warpgroups, bool causal,
                      int table, int scale_bits, bool scale_negative, int producer_registers) {
        const pagecheck::WgmmaKernel& kernel = pagecheck::prefill_wgmma_kernel(wgmma_variant(
            dtype, head_dim, key_tile, stages, warpgroups, causal, table, scale_bits, scale_negative,
            producer_registers));
        return nb::make_tuple(kernel.name, nb::bytes(kernel.image.data(), kernel.image.size()), kernel.format);
      },
      "dtype"_a, "head_dim"_a, "key_tile"_a, "stages"_a, "warpgroups"_a, "causal"_a, "table"_a, "scale_bits"_a,
      "scale_negative"_a, "producer_registers"_a = 0,
      "(name, image, format) of one variant of the warpgroup prefill (scale_bits: the float32 bit pattern of "
      "the scale's magnitude; scale_negative: its sign), compiled by NVRTC as the op compiles it (needs MLX's "
      "CUDA back-end, which loads NVRTC): format 'cubin' (sm_90a machine code, the default) or 'ptx' "
      "(compute_90a; PAGECHECK_WGMMA_IMAGE=ptx, or an NVRTC without cubins). The image is what "
      "mx.fast.precompiled_cuda_kernel runs, with the inputs of the other kernels and the int scalars batch, "
      "num_q_heads, num_queries, head_dim, num_pages, num_kv_heads, page_size, max_pages.");

  module.def(
      "compact_kernel_source",
      [](const std::string& text) { return pagecheck::compact_kernel_source(text); },
      "text"_a,
      "A kernel source as the GPU op hands it to MLX: comments, indentation and blank lines removed, "
      "literals and line structure kept.");

  module.def(
      "kernel_header_include",
      [](const std::string& stem, const std::string& text) { return pagecheck::header_file_include(stem, text); },
      "stem"_a,
      "text"_a,
      "The `#include` line the CUDA attention op hands MLX instead of a kernel header's text: a file holding "
      "exactly `text`, in a directory private to this user and build (<temp>/pagecheck-<uid>/<digest>/), or "
      "None where no such file can be made safely.");

  module.def("nvrtc_reads_header_files", &pagecheck::nvrtc_reads_header_files,
             "Whether the NVRTC that MLX compiles with reads the op's header files (a probe, once per process); "
             "False without a loaded NVRTC, where the op hands MLX the header's text.");

  module.def("reuse_kernel_nodes", &pagecheck::reuse_kernel_nodes,
             "Whether PAGECHECK_REUSE_KERNEL_NODES=1 asks the GPU ops to keep each custom kernel's MLX primitive "
             "and reuse it across calls (an experiment, off by default; see ext/src/common/kernel_node.h). "
             "ValueError names a value other than unset, empty, 0 or 1.");

  module.def(
      "gpu_plan_constants",
      [] {
        nb::dict result;
        for (const auto& [name, value] : pagecheck::gpu_plan_constants()) {
          result[name] = value;
        }
        return result;
      },
      "The planner's constants the Python tools use (threads_per_block, min_split_positions, max_splits, "
      "decode_mma_stages, ...), by name.");

  module.def(
      "gpu_takes_tensor_cores",
      [](int head_dim, const std::string& dtype) {
        return pagecheck::gpu_takes_tensor_cores(storage_dtype_named(dtype), head_dim);
      },
      "head_dim"_a, "dtype"_a,
      "Whether the tensor-core kernels take this head dim and dtype.");

  module.def(
      "gpu_takes_warpgroup_mma",
      [](int head_dim, const std::string& dtype) {
        return pagecheck::gpu_takes_warpgroup_mma(storage_dtype_named(dtype), head_dim);
      },
      "head_dim"_a, "dtype"_a,
      "Whether the warpgroup prefill takes this head dim and dtype (on a device with warpgroup MMA).");

  module.def(
      "gpu_decode_shared_bytes",
      [](int head_dim, int rows, const std::string& dtype, bool tensor_cores, int mma_stages, bool swizzled_rows) {
        const mlx::core::Dtype storage = storage_dtype_named(dtype);
        if (head_dim < 1 || rows < 1 || mma_stages < 1) {
          throw std::invalid_argument("gpu_decode_shared_bytes: head_dim, rows and mma_stages must be positive");
        }
        return pagecheck::gpu_decode_shared_bytes(storage, head_dim, rows, tensor_cores, mma_stages, swizzled_rows);
      },
      "head_dim"_a, "rows"_a, "dtype"_a, nb::kw_only(), "tensor_cores"_a, "mma_stages"_a, "swizzled_rows"_a,
      "Dynamic shared memory of a decode walk in bytes: its staging ring or its merge region, whichever is larger.");

  module.def(
      "gpu_walk_registers",
      [](bool tensor_cores, int rows) {
        if (rows < 1) {
          throw std::invalid_argument("gpu_walk_registers: rows must be positive");
        }
        return pagecheck::gpu_walk_registers(tensor_cores, rows);
      },
      "tensor_cores"_a, "rows"_a,
      "Registers per thread of a decode walk at most, as the split rule counts resident blocks.");
}
