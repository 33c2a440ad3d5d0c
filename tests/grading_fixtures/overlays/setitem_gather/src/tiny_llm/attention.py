"""Overlay on correct/: copies each request's pages one by one into a preallocated dense K/V (slice assignment,
no gathering function named), then runs dense attention on it. The output is right; the method is not."""

import mlx.core as mx

from .dense_rows import attend_rows
from .honest_attention import _check_inputs


def paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale=None, mask=None):
    table, lens = _check_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask)
    query, key_pages, value_pages = (x if isinstance(x, mx.array) else mx.array(x) for x in (query, key_pages, value_pages))
    kv_heads, dim = key_pages.shape[1], key_pages.shape[3]

    def gather(row, n):
        k = mx.zeros((kv_heads, n, dim), dtype=mx.float32)
        v = mx.zeros((kv_heads, n, dim), dtype=mx.float32)
        for i in range(-(-n // page_size)):
            used = min(page_size, n - i * page_size)
            k[:, i * page_size : i * page_size + used] = key_pages[int(table[row, i]), :, :used]
            v[:, i * page_size : i * page_size + used] = value_pages[int(table[row, i]), :, :used]
        return k, v

    return attend_rows(query, kv_heads, lens, scale, mask, gather).astype(query.dtype)
