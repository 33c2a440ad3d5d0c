"""Mutant: padding entries of the caller's block table are clamped to 0 in place."""

from typing import Any

import mlx.core as mx
import numpy as np

from reference import attention
from reference.subject import BatchingKvCache, TinyKvPagedCache, TinyKvPagedPool  # noqa: F401
from reference.validation import check_paged_inputs

KILLED_BY = "inputs_unchanged"


def paged_attention(
    query: Any, key_pages: Any, value_pages: Any, block_table: Any, context_lens: Any, page_size: int,
    scale: float | None = None, mask: str | None = None,
) -> np.ndarray:
    check_paged_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask)
    if isinstance(block_table, np.ndarray):
        np.maximum(block_table, 0, out=block_table)
    else:
        block_table[:] = mx.maximum(block_table, 0)
    return attention.paged_attention(
        query, key_pages, value_pages, block_table, context_lens, page_size, scale=scale, mask=mask
    )
