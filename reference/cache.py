"""A paged KV cache for one request and one layer, in plain Python.

The cache owns an ordered list of page ids from its pool and how many tokens
each holds. Appending fills the tail page first; a new page is allocated only
when the tail page is full (lazy tail allocation). Its metadata is what a
paged-attention kernel reads: the pool's pages, an int32 block table padded
with -1, and the context length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pagecheck.reference.pool import TinyKvPagedPool

# The most positions a cache holds: its context length goes to the kernels as int32.
MAX_CONTEXT = 2**31 - 1


def table_width(max_pages: Any, num_pages: int, page_size: int) -> int:
    """A block table's width: `max_pages`, or the cache's `num_pages` for None; ValueError for anything but an
    int from num_pages to the pages of the longest context."""
    width = num_pages if max_pages is None else max_pages
    most = -(-MAX_CONTEXT // page_size)
    if not isinstance(width, int) or isinstance(width, bool) or not num_pages <= width <= most:
        raise ValueError(f"max_pages={max_pages!r} must be an int in num_pages={num_pages}..{most}, the pages of "
                         "the longest context (2**31 - 1 positions)")
    return width


@dataclass(frozen=True)
class PagedKvMetadata:
    key_pages: Any
    value_pages: Any
    block_table: Any
    context_lens: Any
    page_size: int
    mask: Any = None


class TinyKvPagedCache:
    def __init__(self, pool: TinyKvPagedPool) -> None:
        self.pool = pool
        self.page_ids: list[int] = []
        self.page_lens: list[int] = []
        self._table: np.ndarray | None = None  # block_table()'s, for the page ids and width in _table_key
        self._table_key: tuple[tuple[int, ...], int] | None = None

    @property
    def offset(self) -> int:
        return sum(self.page_lens)

    @property
    def num_pages(self) -> int:
        return len(self.page_ids)

    def update_and_fetch_paged(
        self, key: Any, value: Any, mask_length: int | None = None, mask: Any = None
    ) -> PagedKvMetadata:
        self.append(key, value)
        return self.paged_metadata(mask)

    def update_and_fetch(
        self, key: Any, value: Any, mask_length: int | None = None, mask: Any = None
    ) -> tuple[np.ndarray, np.ndarray, int, Any]:
        self.append(key, value)
        keys, values = self.gather_dense()
        return keys, values, self.offset, mask

    def append(self, key: Any, value: Any) -> None:
        """Write a [1, H_kv, S, D] chunk; on any failure nothing changes."""
        self.pool._check_chunk(key, value)
        length = key.shape[2]
        pool = self.pool
        saved = (list(self.page_ids), list(self.page_lens), _pool_state(pool))
        try:
            written = 0
            while written < length:
                if not self.page_ids or self.page_lens[-1] == pool.page_size:
                    self.page_ids.append(pool.allocate_page())
                    self.page_lens.append(0)
                start = self.page_lens[-1]
                take = min(pool.page_size - start, length - written)
                pool.write_page_slice(
                    self.page_ids[-1], start, key[:, :, written : written + take], value[:, :, written : written + take]
                )
                self.page_lens[-1] += take
                written += take
        except BaseException:
            self.page_ids, self.page_lens = saved[0], saved[1]
            _restore_pool_state(pool, saved[2])
            raise

    def block_table(self, max_pages: int | None = None) -> np.ndarray:
        """[1, width] int32: the page ids, then -1. The same array while the page ids and width stay (the course
        asks `cache.block_table() is first` until a page is added), a new one after."""
        width = table_width(max_pages, self.num_pages, self.pool.page_size)
        key = (tuple(self.page_ids), width)
        if self._table_key != key:
            table = np.full((1, width), -1, dtype=np.int32)
            table[0, : self.num_pages] = self.page_ids
            self._table, self._table_key = table, key
        return self._table

    def context_lens(self) -> np.ndarray:
        return np.array([self.offset], dtype=np.int32)

    def _check_storage(self, caller: str) -> None:
        if self.pool.key_pages is None or self.pool.value_pages is None:
            raise ValueError(f"{caller}: the pool has no page storage yet (nothing was written to it)")

    def paged_metadata(self, mask: Any = None) -> PagedKvMetadata:
        self._check_storage("paged_metadata")
        # The table copied: an attention that writes into it must not change the one block_table() hands out again.
        return PagedKvMetadata(
            self.pool.key_pages, self.pool.value_pages, self.block_table().copy(), self.context_lens(),
            self.pool.page_size, mask,
        )

    def gather_dense(self) -> tuple[np.ndarray, np.ndarray]:
        from pagecheck.reference.attention import gather_request

        self._check_storage("gather_dense")
        n = self.offset
        ids = np.array(self.page_ids, dtype=np.int64)
        keys = gather_request(self.pool.key_pages, ids, n, self.pool.page_size)[None]
        values = gather_request(self.pool.value_pages, ids, n, self.pool.page_size)[None]
        return keys, values

    def materialize(self) -> None:
        """NumPy storage is always materialised; kept for API compatibility."""

    def release(self) -> None:
        """Return every page exactly once; the cache is empty afterwards."""
        for page_id in self.page_ids:
            self.pool.free_page(page_id)
        self.page_ids, self.page_lens = [], []

    def rewind(self, n: int) -> None:
        """Forget the last n tokens, freeing pages left empty."""
        if not isinstance(n, int) or not 0 <= n <= self.offset:
            raise ValueError(f"rewind n={n!r} must be an int in [0, {self.offset}]")
        while n:
            drop = min(n, self.page_lens[-1])
            self.page_lens[-1] -= drop
            n -= drop
            if self.page_lens[-1] == 0:
                self.pool.free_page(self.page_ids.pop())
                self.page_lens.pop()


def _pool_state(pool: TinyKvPagedPool) -> dict[str, Any]:
    state = dict(vars(pool))
    state["_free"] = list(pool._free)
    for name in ("_keys", "_values"):
        if state[name] is not None:
            state[name] = state[name].copy()
    return state


def _restore_pool_state(pool: TinyKvPagedPool, state: dict[str, Any]) -> None:
    vars(pool).clear()
    vars(pool).update(state)
