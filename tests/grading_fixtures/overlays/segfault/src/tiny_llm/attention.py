"""Overlay on correct/: paged_attention dereferences a null pointer; the pool and cache stay correct."""

import ctypes


def paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale=None, mask=None):
    return ctypes.string_at(0)
