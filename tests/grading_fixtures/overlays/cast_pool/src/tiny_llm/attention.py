"""Overlay on correct/: an honest page walk that first reads both pools whole in float32 (a cast of every page,
not a gather of any request's), then walks each request's pages through its block table as correct/ does.
The gather tripwire must not take the cast for a gather."""

import mlx.core as mx

from .honest_attention import _attend_one_request, _check_inputs


def paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale=None, mask=None):
    table, lens = _check_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask)
    query, key_pages, value_pages = (x if isinstance(x, mx.array) else mx.array(x) for x in (query, key_pages, value_pages))
    key_pages, value_pages = key_pages.astype(mx.float32), value_pages.astype(mx.float32)
    batch, num_q_heads, num_queries, head_dim = query.shape
    scale = head_dim ** -0.5 if scale is None else float(scale)
    rows = []
    for row in range(batch):
        context = int(lens[row])
        if context == 0:
            rows.append(mx.zeros((num_q_heads, num_queries, head_dim), dtype=mx.float32))
            continue
        pages = [int(p) for p in table[row, : -(-context // page_size)]]
        rows.append(_attend_one_request(query[row].astype(mx.float32), key_pages, value_pages, pages, context,
                                        int(page_size), scale, mask == "causal"))
    return mx.stack(rows).astype(query.dtype)
