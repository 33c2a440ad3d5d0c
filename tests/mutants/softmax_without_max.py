"""Mutant: a float32 softmax that exponentiates raw scores, without subtracting the row maximum."""

from typing import Any

import numpy as np

from reference.arrays import to_numpy
from reference.attention import gather_dense, kv_head_for, visible_keys
from reference.subject import BatchingKvCache, TinyKvPagedCache, TinyKvPagedPool  # noqa: F401
from reference.validation import check_paged_inputs

KILLED_BY = "softmax_stability"


def paged_attention(
    query: Any, key_pages: Any, value_pages: Any, block_table: Any, context_lens: Any, page_size: int,
    scale: float | None = None, mask: str | None = None,
) -> np.ndarray:
    check_paged_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask)
    keys, values = gather_dense(key_pages, value_pages, block_table, context_lens, page_size)
    q = to_numpy(query, np.float32)
    batch, num_q_heads, num_queries, head_dim = q.shape
    scale = head_dim**-0.5 if scale is None else scale
    out = np.zeros(q.shape, dtype=np.float32)
    for b, n in enumerate(to_numpy(context_lens)):
        visible = visible_keys(int(n), num_queries, mask)
        for h in range(num_q_heads):
            g = kv_head_for(h, num_q_heads, keys.shape[1])
            k, v = keys[b, g, :n].astype(np.float32), values[b, g, :n].astype(np.float32)
            with np.errstate(over="ignore", invalid="ignore"):
                weights = np.where(visible, np.exp((q[b, h] @ k.T) * np.float32(scale)), np.float32(0))
                total = weights.sum(axis=1, keepdims=True)
                out[b, h] = np.where(total > 0, (weights @ v) / np.where(total > 0, total, 1), 0)
    return out
