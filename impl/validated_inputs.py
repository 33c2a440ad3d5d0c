"""The paged-attention input contract, checked once per block table and context-length pair.

check_paged_inputs (reference/validation.py) reads the metadata values on the
host, at a cost that grows with the table. A caller that passes the same
block_table and context_lens arrays again, with inputs of the same shapes and
dtypes (every layer of a serving step; back-to-back calls), would get the same
verdict, so the extension remembers the arrays once they pass
(ext/src/paged_attention/validated_metadata.h) and later calls skip the
check. Any other call (a new array, another shape, dtype, page size or mask,
arguments that are not MLX arrays) runs the full check, whose ValueError
names the field and the value.
"""

from __future__ import annotations

from typing import Any, Callable

import mlx.core as mx

from pagecheck import ext
from pagecheck.reference.validation import check_paged_inputs, is_supported_mask

# Page sizes the extension's int argument takes; others go through the full check.
_INT32_LIMIT = 2**31


def _memo_arguments(
    query: Any, key_pages: Any, value_pages: Any, block_table: Any, context_lens: Any, page_size: Any,
    mask: Any,
) -> tuple[Any, ...] | None:
    """The extension's memo arguments, or None when this call cannot be remembered."""
    if not is_supported_mask(mask):
        return None
    if type(page_size) is not int or not 0 < page_size < _INT32_LIMIT:
        return None
    arrays = (query, key_pages, value_pages, block_table, context_lens)
    if not all(isinstance(array, mx.array) for array in arrays):
        return None
    return (*arrays, page_size, mask == "causal")


def attend_after_memo_miss(
    query: Any, key_pages: Any, value_pages: Any, block_table: Any, context_lens: Any, page_size: Any,
    mask: str | None, attend: Callable[[], mx.array],
) -> mx.array:
    """Paged attention for a call the extension's memo declined (ext.validated_paged_attention gave None).

    That call answers for remembered int32 metadata only; remembered metadata of other dtypes is looked
    up here and skips the check. Anything else is checked in full (check_paged_inputs raises ValueError),
    remembered when it can be, and computed by `attend`.
    """
    memo = _memo_arguments(query, key_pages, value_pages, block_table, context_lens, page_size, mask)
    if memo is not None and not (block_table.dtype == mx.int32 and context_lens.dtype == mx.int32):
        if ext.paged_inputs_validated(*memo):
            return attend()
    check_paged_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask)
    if memo is not None:
        ext.remember_valid_paged_inputs(*memo)
    return attend()
