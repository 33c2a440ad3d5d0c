"""A submission whose paged_attention never returns."""

import time

from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedCache, TinyKvPagedPool  # noqa: F401


def paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale=None, mask=None):
    while True:
        time.sleep(60)
