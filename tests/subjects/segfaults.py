"""A subject whose paged_attention dereferences a null pointer: the process running the check dies."""

import ctypes

from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedCache, TinyKvPagedPool  # noqa: F401


def paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale=None, mask=None):
    return ctypes.string_at(0)
