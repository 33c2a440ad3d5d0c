// Python bindings of the pagecheck extension (module ext._ext).
// std::invalid_argument from the ops becomes ValueError (nanobind's default
// translation), raised at call time for shapes and dtypes and, on the CPU
// stream, for block-table, context and id values; values that are tracers
// under mx.compile are checked when the CPU task runs, and MLX raises that
// as RuntimeError at evaluation (common/ready_inputs.h).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/variant.h>

#include "build_info.h"
#include "common/gpu_plan.h"
#include "dense_attention/dense_attention.h"
#include "paged_attention/paged_attention.h"
#include "paged_attention/validated_metadata.h"
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
      [](const mlx::core::array& query, const mlx::core::array& key_pages, const mlx::core::array& value_pages,
         const mlx::core::array& block_table, const mlx::core::array& context_lens, int page_size,
         std::optional<float> scale, bool causal) -> std::optional<mlx::core::array> {
        if (block_table.dtype() != mlx::core::int32 || context_lens.dtype() != mlx::core::int32 ||
            !pagecheck::metadata_validated(
                block_table, context_lens,
                pagecheck::paged_validation_key(query, key_pages, value_pages, page_size, causal))) {
          return std::nullopt;
        }
        return pagecheck::paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size,
                                          scale, causal);
      },
      "query"_a, "key_pages"_a, "value_pages"_a, "block_table"_a, "context_lens"_a, "page_size"_a,
      "scale"_a = nb::none(), "causal"_a = false,
      "paged_attention for int32 metadata remembered as valid with inputs of these shapes and dtypes "
      "(paged_inputs_validated); None for any other call, which the caller validates first. One call "
      "for the common case of a block table used again.");

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

  // The GPU launch plan for a shape, without a GPU: the tests hold the Python
  // launcher (pagecheck/gpu_kernels.py) to the same plan.
  module.def(
      "gpu_launch_plan",
      [](int batch, int num_q_heads, int query_len, int head_dim, int num_kv_heads, int page_size,
         int pages_per_request, const std::string& dtype) {
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
        const pagecheck::GpuPlan plan = pagecheck::plan_gpu_call(shape, storage, /*tensor_cores_available=*/true);
        // The order of ext.PLAN_FIELDS.
        return std::make_tuple(std::string(pagecheck::gpu_schedule_name(plan.schedule)), plan.tensor_cores, plan.rows,
                               plan.blocks, plan.splits, plan.shared_bytes, plan.key_tile, plan.mma_stages,
                               plan.scratch_words, plan.out_begin_words, plan.swizzled_rows);
      },
      "batch"_a, "num_q_heads"_a, "query_len"_a, "head_dim"_a, "num_kv_heads"_a, "page_size"_a,
      "pages_per_request"_a, "dtype"_a,
      "The CUDA launch plan the op would take for this shape, as a tuple in the order of ext.PLAN_FIELDS; "
      "computed on any machine.");
}
