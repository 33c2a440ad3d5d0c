"""Overlay on correct/: paged_attention keeps a new 256 MiB buffer on every call; the pool and cache stay correct."""

import numpy as np

_kept = []


def paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale=None, mask=None):
    _kept.append(np.ones(1 << 25, dtype=np.float64))
    return query
