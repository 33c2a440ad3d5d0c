"""A submission whose paged_attention keeps a new 256 MiB scratch buffer on every call."""

import numpy as np

from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedCache, TinyKvPagedPool  # noqa: F401
from pagecheck.reference.subject import paged_attention as _paged_attention

_scratch: list[np.ndarray] = []


def paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale=None, mask=None):
    _scratch.append(np.empty(1 << 25, dtype=np.float64))
    return _paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale, mask)
