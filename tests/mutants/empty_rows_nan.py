"""Mutant: a row with context 0 divides 0 by 0 and returns NaN instead of zeros."""

from typing import Any

import numpy as np

from reference.arrays import to_numpy
from reference.subject import BatchingKvCache, TinyKvPagedCache, TinyKvPagedPool  # noqa: F401
from tests.mutants._overrides import attention_with

KILLED_BY = "empty_rows"

_attention = attention_with(lambda a: a)


def paged_attention(
    query: Any, key_pages: Any, value_pages: Any, block_table: Any, context_lens: Any, page_size: int,
    scale: float | None = None, mask: str | None = None,
) -> np.ndarray:
    out = _attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale=scale, mask=mask)
    out[to_numpy(context_lens) == 0] = np.nan
    return out
