"""Overlay on correct/: paged_attention never returns; the pool and cache stay correct."""

import time


def paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale=None, mask=None):
    while True:
        time.sleep(60)
