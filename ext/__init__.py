"""pagecheck's C++ MLX extension: paged and dense attention ops, and the quantized embedding lookup.

mlx.core is imported first: it loads libmlx.so and registers the array type
that the extension's bindings share (nanobind domain "mlx").
"""

import mlx.core  # noqa: F401  (must precede the extension module)

from ext._ext import build_info, dense_attention, paged_attention, quantized_embedding

__all__ = ["build_info", "dense_attention", "paged_attention", "quantized_embedding"]
