"""Mutant: a row with context 0 divides 0 by 0 and returns NaN instead of zeros."""

import numpy as np

from pagecheck.reference.attention import dense_attention
from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedCache, TinyKvPagedPool  # noqa: F401
from tests.mutants._overrides import dense_mutant

KILLED_BY = "empty_rows"


def _attend(
    query: np.ndarray, keys: np.ndarray, values: np.ndarray, lens: np.ndarray, scale: float, mask: str | None
) -> np.ndarray:
    out = dense_attention(query, keys, values, scale, mask, lens)
    out[lens == 0] = np.nan
    return out


paged_attention = dense_mutant(_attend)
