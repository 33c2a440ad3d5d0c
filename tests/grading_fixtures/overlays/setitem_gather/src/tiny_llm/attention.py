"""Overlay on correct/: copies each request's pages one by one into a preallocated dense K/V (slice assignment,
no gathering function named), then runs dense attention on it. The output is right; the method is not."""

import mlx.core as mx

from .honest_attention import _check_inputs


def _dense(q, k, v, scale, causal):
    scores = (q @ k.swapaxes(-1, -2)) * scale
    if causal:
        length, context = q.shape[-2], k.shape[-2]
        visible = mx.arange(context)[None, :] <= mx.arange(length)[:, None] + (context - length)
        scores = mx.where(visible, scores, -1e30)
    return mx.softmax(scores, axis=-1) @ v


def paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale=None, mask=None):
    table, lens = _check_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask)
    query, key_pages, value_pages = (x if isinstance(x, mx.array) else mx.array(x) for x in (query, key_pages, value_pages))
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    batch, heads, length, dim = query.shape
    kv_heads = key_pages.shape[1]
    rows = []
    for row in range(batch):
        n = int(lens[row])
        if n == 0:
            rows.append(mx.zeros((heads, length, dim), dtype=mx.float32))
            continue
        k = mx.zeros((kv_heads, n, dim), dtype=mx.float32)
        v = mx.zeros((kv_heads, n, dim), dtype=mx.float32)
        for i in range(-(-n // page_size)):
            used = min(page_size, n - i * page_size)
            k[:, i * page_size : i * page_size + used] = key_pages[int(table[row, i]), :, :used]
            v[:, i * page_size : i * page_size + used] = value_pages[int(table[row, i]), :, :used]
        q = query[row].astype(mx.float32).reshape(kv_heads, heads // kv_heads, length, dim)
        rows.append(_dense(q, k[:, None], v[:, None], scale, mask == "causal").reshape(heads, length, dim))
    return mx.stack(rows).astype(query.dtype)
