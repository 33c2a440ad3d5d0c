"""Float64 NumPy attention: the ground truth every other implementation is judged by.

Written for reading, not speed: one request and one query head at a time,
exactly the equation of the paged-attention contract.

Layout contract
- query        [B, H_q, L, D]
- key/value    pages [P, H_kv, page_size, D]
- block_table  int32 [B, max_pages], -1 where no page is mapped
- context_lens int32 [B]
Logical position s of request b lives in page block_table[b, s // page_size],
slot s % page_size; only positions s < context_lens[b] exist.
GQA: query head h reads kv head h // (H_q // H_kv).
mask="causal": the L queries are the LAST L positions of the context, so key
s is visible to query row l iff s <= l + context_len - L.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pagecheck.reference.arrays import to_numpy

MASKS = (None, "causal")


def kv_head_for(q_head: int, num_q_heads: int, num_kv_heads: int) -> int:
    """The one GQA head-mapping rule: consecutive query heads share a kv head."""
    return q_head // (num_q_heads // num_kv_heads)


def visible_keys(context_len: int, num_queries: int, mask: str | None) -> np.ndarray:
    """Boolean [L, context_len]: may query row l attend to key s?"""
    if mask not in MASKS:
        raise NotImplementedError(f"mask={mask!r} is not supported (use None or 'causal')")
    rows = np.arange(num_queries)[:, None]
    keys = np.arange(context_len)[None, :]
    if mask == "causal":
        return keys <= rows + context_len - num_queries
    return np.ones((num_queries, context_len), dtype=bool)


def attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, visible: np.ndarray, scale: float) -> np.ndarray:
    """softmax(q k^T * scale) v for one head, [L, D] x [S, D] -> [L, D].

    Invisible keys are removed with `where`, not by multiplying, so a NaN in a
    key that should never be read cannot leak into the result. A row that sees
    no key returns zeros.
    """
    out = np.zeros((q.shape[0], v.shape[1]), dtype=np.float64)
    for row in range(q.shape[0]):
        keys_seen = np.flatnonzero(visible[row])
        if keys_seen.size == 0:
            continue
        scores = (k[keys_seen] @ q[row]) * scale
        weights = np.exp(scores - scores.max())
        out[row] = (weights / weights.sum()) @ v[keys_seen]
    return out


def gather_request(pages: np.ndarray, page_ids: np.ndarray, context_len: int, page_size: int) -> np.ndarray:
    """Rebuild one request's dense [H_kv, context_len, D] tensor in logical order."""
    positions = np.arange(context_len)
    ids = page_ids[positions // page_size]
    slots = positions % page_size
    return pages[ids, :, slots, :].transpose(1, 0, 2)


def gather_dense(
    key_pages: Any, value_pages: Any, block_table: Any, context_lens: Any, page_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """Dense float64 K and V [B, H_kv, max(context_lens), D], zero past each row's context."""
    kp, vp = to_numpy(key_pages, np.float64), to_numpy(value_pages, np.float64)
    table, lens = to_numpy(block_table), to_numpy(context_lens)
    batch = table.shape[0]
    width = int(lens.max()) if batch else 0
    keys = np.zeros((batch, kp.shape[1], width, kp.shape[3]))
    values = np.zeros((batch, vp.shape[1], width, vp.shape[3]))
    for b in range(batch):
        n = int(lens[b])
        keys[b, :, :n] = gather_request(kp, table[b], n, page_size)
        values[b, :, :n] = gather_request(vp, table[b], n, page_size)
    return keys, values


def dense_attention(
    query: Any,
    key: Any,
    value: Any,
    scale: float | None = None,
    mask: str | None = None,
    context_lens: Any | None = None,
) -> np.ndarray:
    """Attention over dense K/V [B, H_kv, S, D]; context_lens (default S) limits each row."""
    q = to_numpy(query, np.float64)
    k, v = to_numpy(key, np.float64), to_numpy(value, np.float64)
    batch, num_q_heads, num_queries, head_dim = q.shape
    num_kv_heads = k.shape[1]
    if num_q_heads % num_kv_heads:
        raise ValueError(f"H_q={num_q_heads} is not a multiple of H_kv={num_kv_heads}")
    lens = np.full(batch, k.shape[2]) if context_lens is None else to_numpy(context_lens)
    scale = head_dim**-0.5 if scale is None else scale
    out = np.zeros(q.shape, dtype=np.float64)
    for b in range(batch):
        n = int(lens[b])
        visible = visible_keys(n, num_queries, mask)
        for h in range(num_q_heads):
            g = kv_head_for(h, num_q_heads, num_kv_heads)
            out[b, h] = attend(q[b, h], k[b, g, :n], v[b, g, :n], visible, scale)
    return out


def paged_attention(
    query: Any,
    key_pages: Any,
    value_pages: Any,
    block_table: Any,
    context_lens: Any,
    page_size: int,
    scale: float | None = None,
    mask: str | None = None,
) -> np.ndarray:
    """Paged attention in float64: gather each request through its block table, then attend."""
    keys, values = gather_dense(key_pages, value_pages, block_table, context_lens, page_size)
    return dense_attention(query, keys, values, scale=scale, mask=mask, context_lens=context_lens)
