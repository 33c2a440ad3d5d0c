"""Overlay on correct/: an honest page walk that first reads both pools whole in float32 (a cast of every page,
not a gather of any request's), then runs correct/'s walk on them. The gather tripwire must not take the cast
for a gather."""

import mlx.core as mx

from .honest_attention import _check_inputs
from .honest_attention import paged_attention as _honest


def paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale=None, mask=None):
    _check_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask)  # as given
    query, key_pages, value_pages = (x if isinstance(x, mx.array) else mx.array(x) for x in (query, key_pages, value_pages))
    out = _honest(query.astype(mx.float32), key_pages.astype(mx.float32), value_pages.astype(mx.float32),
                  block_table, context_lens, page_size, scale, mask)
    return out.astype(query.dtype)
