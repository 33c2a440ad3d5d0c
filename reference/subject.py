"""The reference as a subject: the float64 oracle behind the same checks as any implementation."""

from __future__ import annotations

from typing import Any

import numpy as np

from pagecheck.reference import attention
from pagecheck.reference.batching_cache import BatchingKvCache
from pagecheck.reference.cache import PagedKvMetadata, TinyKvPagedCache
from pagecheck.reference.pool import TinyKvPagedPool
from pagecheck.reference.validation import check_paged_inputs

__all__ = ["BatchingKvCache", "PagedKvMetadata", "TinyKvPagedCache", "TinyKvPagedPool", "paged_attention"]


def paged_attention(
    query: Any,
    key_pages: Any,
    value_pages: Any,
    block_table: Any,
    context_lens: Any,
    page_size: int,
    scale: float | None = None,
    mask: str | None = None,
) -> Any:
    """The float64 oracle's output: a NumPy float64 array for a NumPy query, and for an MLX query an MLX array
    in the query's dtype, as an implementation returns it (the course holds a bfloat16 decode to a bfloat16
    output)."""
    check_paged_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask)
    out = attention.paged_attention(
        query, key_pages, value_pages, block_table, context_lens, page_size, scale=scale, mask=mask
    )
    if not type(query).__module__.startswith("mlx"):
        return out
    import mlx.core as mx

    return mx.array(out.astype(np.float32)).astype(query.dtype)
