"""Mutant: a two-split online softmax that merges the splits without rescaling to the common maximum.

The keys of each row are split at a page boundary near the middle; each split
keeps (max, sum of exp, weighted values). The correct merge scales both by
exp(split max - common max); this one adds them as they are.
"""

from typing import Any

import numpy as np

from reference.arrays import to_numpy
from reference.attention import gather_dense, kv_head_for, visible_keys
from reference.subject import BatchingKvCache, TinyKvPagedCache, TinyKvPagedPool  # noqa: F401
from reference.validation import check_paged_inputs

KILLED_BY = "page_sizes"


def _split_state(scores: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    top = np.where(np.isfinite(scores).any(axis=1), scores.max(axis=1, initial=-np.inf), 0.0)[:, None]
    weights = np.exp(scores - top)
    return top, weights.sum(axis=1, keepdims=True), weights @ values


def paged_attention(
    query: Any, key_pages: Any, value_pages: Any, block_table: Any, context_lens: Any, page_size: int,
    scale: float | None = None, mask: str | None = None,
) -> np.ndarray:
    check_paged_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask)
    keys, values = gather_dense(key_pages, value_pages, block_table, context_lens, page_size)
    q = to_numpy(query, np.float64)
    batch, num_q_heads, num_queries, head_dim = q.shape
    scale = head_dim**-0.5 if scale is None else scale
    out = np.zeros(q.shape)
    for b, n in enumerate(to_numpy(context_lens)):
        n = int(n)
        visible = visible_keys(n, num_queries, mask)
        split = -(-n // page_size) // 2 * page_size
        for h in range(num_q_heads):
            g = kv_head_for(h, num_q_heads, keys.shape[1])
            scores = np.where(visible, (q[b, h] @ keys[b, g, :n].T) * scale, -np.inf)
            _, sum_a, acc_a = _split_state(scores[:, :split], values[b, g, :split])
            _, sum_b, acc_b = _split_state(scores[:, split:], values[b, g, split:n])
            total = sum_a + sum_b  # the bug: neither split is rescaled to the common maximum
            out[b, h] = np.where(total > 0, (acc_a + acc_b) / np.where(total > 0, total, 1), 0)
    return out
