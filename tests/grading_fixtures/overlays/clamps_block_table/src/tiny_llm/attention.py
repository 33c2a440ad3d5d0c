"""Overlay on correct/: paged_attention clamps the caller's block table in place (-1 becomes 0) after an
otherwise correct computation: the output is right, the serving loop's table is not."""

import mlx.core as mx

from .honest_attention import paged_attention as _honest


def paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale=None, mask=None):
    result = _honest(query, key_pages, value_pages, block_table, context_lens, page_size, scale, mask)
    block_table[...] = mx.maximum(block_table, 0)
    return result
