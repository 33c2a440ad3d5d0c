"""Mutant: a two-split online softmax that merges the splits without rescaling to the common maximum.

The keys of each row are split in the middle of its context; each split
keeps (max, sum of exp, weighted values). The correct merge scales both by
exp(split max - common max); this one adds them as they are.
"""

import numpy as np

from pagecheck.reference.attention import kv_head_for, visible_keys
from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedCache, TinyKvPagedPool  # noqa: F401
from tests.mutants._overrides import dense_mutant

KILLED_BY = "page_sizes"


def _split_state(scores: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    top = np.where(np.isfinite(scores).any(axis=1), scores.max(axis=1, initial=-np.inf), 0.0)[:, None]
    weights = np.exp(scores - top)
    return weights.sum(axis=1, keepdims=True), weights @ values


def _attend(
    query: np.ndarray, keys: np.ndarray, values: np.ndarray, lens: np.ndarray, scale: float, mask: str | None
) -> np.ndarray:
    out = np.zeros(query.shape)
    for b, n in enumerate(int(n) for n in lens):
        visible = visible_keys(n, query.shape[2], mask)
        split = n // 2
        for h in range(query.shape[1]):
            g = kv_head_for(h, query.shape[1], keys.shape[1])
            scores = np.where(visible, (query[b, h] @ keys[b, g, :n].T) * scale, -np.inf)
            sum_a, acc_a = _split_state(scores[:, :split], values[b, g, :split])
            sum_b, acc_b = _split_state(scores[:, split:], values[b, g, split:n])
            total = sum_a + sum_b  # the bug: neither split is rescaled to the common maximum
            out[b, h] = np.where(total > 0, (acc_a + acc_b) / np.where(total > 0, total, 1), 0)
    return out


paged_attention = dense_mutant(_attend)
