"""Mutant: the pool never keeps a token (what it writes is overwritten with zeros, but for a tag naming the
pool); each cache keeps a private dense copy of what it wrote, and paged_attention, handed a tagged pool, reads
those copies instead of the pages. Every attention over a cache's metadata is right while its pages hold nothing:
only an oracle reading the metadata's pages itself tells."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from pagecheck.reference import attention
from pagecheck.reference.arrays import to_numpy
from pagecheck.reference.batching_cache import BatchingKvCache  # noqa: F401
from pagecheck.reference.cache import TinyKvPagedCache as _ReferenceCache
from pagecheck.reference.pool import TinyKvPagedPool as _ReferencePool
from pagecheck.reference.subject import paged_attention as _reference_attention
from pagecheck.reference.validation import check_paged_inputs

KILLED_BY = "context_len"

TAG = 7.0e6
_POOLS: dict[float, "TinyKvPagedPool"] = {}
_serial = itertools.count(1)


class TinyKvPagedPool(_ReferencePool):
    def __init__(self, page_size: int = 128) -> None:
        super().__init__(page_size)
        self.tag = TAG + next(_serial)
        _POOLS[self.tag] = self
        self.owner: dict[int, TinyKvPagedCache] = {}

    def write_page_slice(self, page_id: int, start: int, key: Any, value: Any) -> None:
        super().write_page_slice(page_id, start, key, value)
        length = key.shape[2]
        self._keys[page_id, :, start : start + length] = 0.0
        self._values[page_id, :, start : start + length] = 0.0
        self._keys[0, 0, 0, 0] = self.tag


class TinyKvPagedCache(_ReferenceCache):
    def __init__(self, pool: TinyKvPagedPool) -> None:
        super().__init__(pool)
        self.private = (None, None)

    def append(self, key: Any, value: Any) -> None:
        super().append(key, value)
        k, v = (to_numpy(x, np.float64)[0] for x in (key, value))
        old_k, old_v = self.private
        self.private = (k, v) if old_k is None else (np.concatenate([old_k, k], 1), np.concatenate([old_v, v], 1))
        for page in self.page_ids:
            self.pool.owner[page] = self

    def gather_dense(self) -> tuple[np.ndarray, np.ndarray]:
        k, v = self.private
        return k[None, :, : self.offset], v[None, :, : self.offset]

    def release(self) -> None:
        super().release()
        self.private = (None, None)

    def rewind(self, n: int) -> None:
        super().rewind(n)
        k, v = self.private
        if k is not None:
            self.private = (k[:, : self.offset], v[:, : self.offset])


def paged_attention(query: Any, key_pages: Any, value_pages: Any, block_table: Any, context_lens: Any, page_size: int,
                    scale: float | None = None, mask: str | None = None) -> np.ndarray:  # fmt: skip
    check_paged_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask)
    pages = to_numpy(key_pages, np.float64)
    pool = _POOLS.get(float(pages[0, 0, 0, 0])) if pages.size else None
    if pool is None:
        return _reference_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale, mask)
    table, lens = to_numpy(block_table), to_numpy(context_lens)
    width = int(lens.max()) if lens.size else 0
    keys = np.zeros((len(lens), pages.shape[1], width, pages.shape[3]))
    values = np.zeros_like(keys)
    for row, n in enumerate(int(n) for n in lens):
        if n:
            k, v = pool.owner[int(table[row, 0])].private
            keys[row, :, :n], values[row, :, :n] = k[:, :n], v[:, :n]
    return attention.dense_attention(query, keys, values, scale=scale, mask=mask, context_lens=lens)
