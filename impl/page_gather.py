"""Gather paged K/V into dense [B, H_kv, S, D] tensors: the gather half of gather + dense."""

from __future__ import annotations

import mlx.core as mx


def gather_pages_dense(pages: mx.array, block_table: mx.array) -> mx.array:
    """[P, H_kv, page_size, D] pages -> [B, H_kv, max_pages * page_size, D].

    Whole pages are taken through the block table; -1 padding reads page 0,
    whose slots lie past every context and must be excluded by context_lens.
    """
    batch, max_pages = block_table.shape
    _, num_kv_heads, page_size, head_dim = pages.shape
    ids = mx.maximum(block_table.reshape(-1), 0)
    taken = mx.take(pages, ids, axis=0)  # [B * max_pages, H_kv, page_size, D]
    taken = taken.reshape(batch, max_pages, num_kv_heads, page_size, head_dim)
    return taken.transpose(0, 2, 1, 3, 4).reshape(batch, num_kv_heads, max_pages * page_size, head_dim)
