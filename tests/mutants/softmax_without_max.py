"""Mutant: a float32 softmax that exponentiates raw scores, without subtracting the row maximum."""

import numpy as np

from pagecheck.reference.attention import kv_head_for, visible_keys
from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedCache, TinyKvPagedPool  # noqa: F401
from tests.mutants._overrides import dense_mutant

KILLED_BY = "softmax_stability"


def _attend(
    query: np.ndarray, keys: np.ndarray, values: np.ndarray, lens: np.ndarray, scale: float, mask: str | None
) -> np.ndarray:
    q, k, v = (x.astype(np.float32) for x in (query, keys, values))
    out = np.zeros(q.shape, dtype=np.float32)
    for b, n in enumerate(int(n) for n in lens):
        visible = visible_keys(n, q.shape[2], mask)
        for h in range(q.shape[1]):
            g = kv_head_for(h, q.shape[1], k.shape[1])
            with np.errstate(over="ignore", invalid="ignore"):
                weights = np.where(visible, np.exp((q[b, h] @ k[b, g, :n].T) * np.float32(scale)), np.float32(0))
                total = weights.sum(axis=1, keepdims=True)
                out[b, h] = np.where(total > 0, (weights @ v[b, g, :n]) / np.where(total > 0, total, 1), 0)
    return out


paged_attention = dense_mutant(_attend)
