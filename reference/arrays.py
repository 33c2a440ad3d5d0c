"""Conversion of subject arrays (NumPy or MLX) to NumPy for comparison."""

from __future__ import annotations

from typing import Any

import numpy as np


def to_numpy(x: Any, dtype: np.dtype | type | None = None) -> np.ndarray:
    """Return `x` as a NumPy array.

    MLX bfloat16 has no NumPy equivalent, so MLX arrays in a non-NumPy float
    dtype are widened to float32 first (exactly: every bf16 value is an f32).
    """
    if isinstance(x, np.ndarray):
        out = x
    elif type(x).__module__.startswith("mlx"):
        import mlx.core as mx

        if x.dtype == mx.bfloat16:
            x = x.astype(mx.float32)
        out = np.array(x)
    else:
        out = np.asarray(x)
    return out.astype(dtype) if dtype is not None else out
