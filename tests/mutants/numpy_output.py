"""Mutant: paged_attention returns its output as a NumPy float32 array, whatever the query's dtype. The values are
right, but a bfloat16 decode no longer gives a bfloat16 output, which the course's own test asserts (NumPy has no
bfloat16)."""

from __future__ import annotations

from typing import Any

import numpy as np

from pagecheck.reference import attention
from pagecheck.reference.batching_cache import BatchingKvCache  # noqa: F401
from pagecheck.reference.cache import TinyKvPagedCache  # noqa: F401
from pagecheck.reference.pool import TinyKvPagedPool  # noqa: F401
from pagecheck.reference.validation import check_paged_inputs

KILLED_BY = "dtypes"


def paged_attention(query: Any, key_pages: Any, value_pages: Any, block_table: Any, context_lens: Any, page_size: int,
                    scale: float | None = None, mask: str | None = None) -> np.ndarray:  # fmt: skip
    check_paged_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask)
    out = attention.paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale=scale, mask=mask)
    return out.astype(np.float32)
