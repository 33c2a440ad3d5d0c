"""pagecheck's C++ MLX extension: paged and dense attention ops, and the quantized embedding lookup.

mlx.core is imported first: it loads libmlx.so and registers the array type
that the extension's bindings share (nanobind domain "mlx").
"""

import mlx.core  # noqa: F401  (must precede the extension module)

from ext import _ext
from ext._ext import (
    build_info,
    dense_attention,
    forget_validated_metadata,
    paged_attention,
    paged_inputs_validated,
    quantized_embedding,
    remember_valid_paged_inputs,
    validated_metadata_entries,
    validated_paged_attention,
)

__all__ = [
    "PLAN_FIELDS",
    "build_info",
    "dense_attention",
    "forget_validated_metadata",
    "gpu_launch_plan",
    "paged_attention",
    "paged_inputs_validated",
    "quantized_embedding",
    "remember_valid_paged_inputs",
    "validated_metadata_entries",
    "validated_paged_attention",
]

PLAN_FIELDS = ("schedule", "mma", "rows", "blocks", "splits", "shared_bytes", "key_tile", "mma_stages",
               "scratch_words", "out_begin_words", "swizzled_rows")


def gpu_launch_plan(batch: int, num_q_heads: int, query_len: int, head_dim: int, num_kv_heads: int, page_size: int,
                    pages_per_request: int, dtype: str) -> dict:
    """The CUDA launch plan the op takes for this shape (ext/src/common/gpu_plan.cpp), on any machine."""
    plan = _ext.gpu_launch_plan(batch, num_q_heads, query_len, head_dim, num_kv_heads, page_size, pages_per_request,
                                dtype)
    return dict(zip(PLAN_FIELDS, plan))
