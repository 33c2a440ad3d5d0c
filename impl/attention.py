"""paged_attention with the course's Week 3 signature, backed by the C++ extension.

The extension's memo is asked first: a block table and context-length pair
already found valid with inputs of the same shapes is not read again
(impl/validated_inputs.py). Any other call is checked in Python before the
extension runs (reference/validation.py: the one list of rejections, each a
ValueError naming the field and the value). Dense K/V is never built and
MLX's own SDPA is never called.

NumPy inputs take the same dtypes as MLX ones: a query or pool that is not
float32 or float16 (NumPy has no bfloat16) is refused with the extension's
message for an MLX array of that dtype, where MLX itself would have turned
float64 into float32. Any byte order and any strides are copied into a native,
contiguous array; a block table or context lengths given as nested lists must
be rectangular.
"""

from __future__ import annotations

import reprlib
from typing import Any

import mlx.core as mx
import numpy as np

from pagecheck import ext
from pagecheck.reference.validation import check_mask, check_scale
from pagecheck.impl.validated_inputs import attend_after_memo_miss

# The NumPy dtypes of a query or pool that the kernels take, and the MLX dtype each is copied to.
NUMPY_ATTENTION_DTYPES = {np.dtype(np.float32): mx.float32, np.dtype(np.float16): mx.float16}
# The longest axis an MLX array has (its shapes are int32); a NumPy array of no elements may have longer ones.
MLX_MAX_EXTENT = 2**31 - 1


def as_array(x: Any, field: str) -> mx.array:
    """An MLX array of the query or pool `x` (an MLX array is taken as it is). Any other array (a NumPy one)
    must be float32 or float16, in either byte order: another dtype is a ValueError worded as the extension's
    for an MLX array of that dtype (ext/src/common/input_checks.cpp). It is copied once when native and
    C-ordered, else first into a native, C-ordered NumPy copy (reversed strides included)."""
    if isinstance(x, mx.array):
        return x
    array = np.asarray(x)
    dtype = array.dtype.newbyteorder("=")
    if dtype not in NUMPY_ATTENTION_DTYPES:
        raise ValueError(f"pagecheck: {field} dtype {dtype.name} is not supported; use float32, bfloat16 or float16")
    return mx.array(_native(array, field, dtype), dtype=NUMPY_ATTENTION_DTYPES[dtype])


def as_int32(x: Any, field: str) -> mx.array:
    """An int32 MLX array of checked metadata (its values fit int32): an MLX array cast, any other copied
    through a native, C-ordered int32 NumPy array."""
    if isinstance(x, mx.array):
        return x if x.dtype == mx.int32 else x.astype(mx.int32)
    return mx.array(_native(np.asarray(x), field, np.dtype(np.int32)))


def _native(array: np.ndarray, field: str, dtype: np.dtype) -> np.ndarray:
    """`array` as C-ordered `dtype` in native byte order (itself when it is one already); ValueError when an
    axis is longer than an MLX array's."""
    if any(extent > MLX_MAX_EXTENT for extent in array.shape):
        raise ValueError(f"{field} shape={array.shape} has an axis longer than {MLX_MAX_EXTENT}, the most MLX holds")
    return np.ascontiguousarray(array, dtype=dtype)


def metadata_array(x: Any, field: str) -> Any:
    """`x` as it is when it is an MLX or NumPy array; otherwise (nested lists) a NumPy array of it, where
    lists NumPy cannot make one array of (rows of different lengths) are a ValueError naming the field."""
    if isinstance(x, (mx.array, np.ndarray)):
        return x
    try:
        return np.asarray(x)
    except (TypeError, ValueError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ValueError(f"{field}={reprlib.repr(x)} is not a rectangular array of integers ({reason})") from None


def paged_attention(
    query: mx.array,
    key_pages: mx.array,
    value_pages: mx.array,
    block_table: mx.array,
    context_lens: mx.array,
    page_size: int,
    scale: float | None = None,
    mask: str | None = None,
) -> mx.array:
    """Attention of query [B, H_q, L, D] over pages [P, H_kv, page_size, D].

    Position s of request b lives in page block_table[b, s // page_size], slot
    s % page_size; only s < context_lens[b] exist. mask="causal" treats the L
    queries as the last L positions of each context. Returns the query dtype.
    """
    if scale is not None:  # a string or an overflowing number: a ValueError naming it, not the binding's TypeError
        check_mask(mask)  # the contract's first rule comes first
        scale = check_scale(scale)
    # Remembered int32 metadata: the extension checks the memo and runs the op in this one call (the hot
    # path of every layer and every back-to-back call, so nothing else runs before it).
    remembered = ext.validated_paged_attention(
        query, key_pages, value_pages, block_table, context_lens, page_size, scale, mask
    )
    if remembered is not None:
        return remembered
    if not (isinstance(block_table, mx.array) and isinstance(context_lens, mx.array)):
        check_mask(mask)  # the contract's first rule comes first
        block_table = metadata_array(block_table, "block_table")
        context_lens = metadata_array(context_lens, "context_lens")
    return attend_after_memo_miss(
        query, key_pages, value_pages, block_table, context_lens, page_size, mask,
        lambda: ext.paged_attention(
            as_array(query, "query"), as_array(key_pages, "key_pages"), as_array(value_pages, "value_pages"),
            as_int32(block_table, "block_table"), as_int32(context_lens, "context_lens"), int(page_size), scale,
            mask == "causal",
        ),
    )  # fmt: skip
