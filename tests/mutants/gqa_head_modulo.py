"""Mutant: query head h reads kv head h % H_kv instead of h // (H_q / H_kv)."""

import numpy as np

from pagecheck.reference.attention import dense_attention
from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedCache, TinyKvPagedPool  # noqa: F401
from tests.mutants._overrides import dense_mutant

KILLED_BY = "gqa_mapping"


def _attend(
    query: np.ndarray, keys: np.ndarray, values: np.ndarray, lens: np.ndarray, scale: float, mask: str | None
) -> np.ndarray:
    # Tiling kv heads H_q / H_kv times gives head h the copy of kv head h % H_kv.
    repeats = (1, query.shape[1] // keys.shape[1], 1, 1)
    return dense_attention(query, np.tile(keys, repeats), np.tile(values, repeats), scale, mask, lens)


paged_attention = dense_mutant(_attend)
