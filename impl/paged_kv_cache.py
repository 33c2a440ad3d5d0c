"""TinyKvPagedCache: one request's K/V for one layer, kept as an ordered list of pool pages.

Appending fills the tail page first and allocates a new page only when the
tail is full, so every page but the last holds exactly page_size tokens. An
append is all or nothing: if any allocation or page write fails, the pool and
the cache are put back as they were (page data included) and the error is
re-raised.

`release()` frees every page once and leaves the cache empty and reusable: a
later append starts again from a fresh page. `rewind(n)` drops the newest n
tokens and frees the pages that become empty. Pages are freed last page
first, so the pool's LIFO reuse hands them back in their original order.

`block_table()` returns the same mx.array object until the page list changes
(an append that only fills the tail page keeps it), so a caller can cache work
keyed on it.
"""

from __future__ import annotations

import reprlib
from collections.abc import Iterator
from typing import NamedTuple

import mlx.core as mx

from pagecheck.impl.page_pool import PoolCheckpoint, TinyKvPagedPool, is_int, python_int_hint, type_label
from pagecheck.impl.paged_metadata import PagedKvMetadata
from pagecheck.reference.cache import MAX_CONTEXT, table_width

__all__ = ["CacheCheckpoint", "PagedKvMetadata", "TinyKvPagedCache", "TinyKvPagedPool"]

# The most pages one append writes page by page (TinyKvPagedCache._write_chunk). Each write is a lazy MLX update
# that holds about 8 KiB of host memory until it is evaluated, memory MLX's limit does not count: a chunk of 2
# million tokens in pages of 1 would build 16 GB of graph and end the process (std::bad_alloc). 2**16 writes
# hold about 0.5 GB, and take 2**16 * page_size tokens (2**21 in pages of 32) in one append.
MAX_APPEND_PAGE_WRITES = 1 << 16
# The most positions one claim_token_slots call lists: it returns a page id and a slot per token as Python ints
# (about 50 bytes a token, and write_token_rows' checks several times that), so a count of 10**9 would fill
# memory. 2**22 positions list in about 0.2 GB.
MAX_CLAIM_TOKENS = 1 << 22


class CacheCheckpoint(NamedTuple):
    """A cache's state before an append, in O(1): appends only push pages and fill the tail page, so the
    page count, the tail page's length and the offset say what to undo. A NamedTuple, like
    PoolCheckpoint, for its cost."""

    num_pages: int
    tail_len: int  # the last page's length then (0 with no pages)
    offset: int
    block_tables: tuple[tuple[int, mx.array], ...]


class TinyKvPagedCache:
    def __init__(self, pool: TinyKvPagedPool) -> None:
        if not isinstance(pool, TinyKvPagedPool):
            raise ValueError(f"pool must be a TinyKvPagedPool, got {type(pool).__name__}")
        self._pool = pool
        self._page_ids: list[int] = []
        self._page_lens: list[int] = []
        self._offset = 0
        # block_table(width) results and page_id_tuple, valid until the page list changes.
        self._block_tables: dict[int, mx.array] = {}
        self._page_tuple: tuple[int, ...] | None = None

    # -- state ----------------------------------------------------------------
    @property
    def pool(self) -> TinyKvPagedPool:
        return self._pool

    @property
    def page_ids(self) -> list[int]:
        return list(self._page_ids)

    @property
    def page_id_tuple(self) -> tuple[int, ...]:
        """The page ids as a tuple: one object, kept until the page list changes, so a caller that reads
        them every step (a batch's block table) copies nothing."""
        pages = self._page_tuple
        if pages is None:
            pages = self._page_tuple = self._make_page_tuple()
        return pages

    def _make_page_tuple(self) -> tuple[int, ...]:
        """The tuple page_id_tuple keeps; a subclass may hand out a shared equal one instead."""
        return tuple(self._page_ids)

    @property
    def page_lens(self) -> list[int]:
        return list(self._page_lens)

    @property
    def num_pages(self) -> int:
        return len(self._page_ids)

    @property
    def tail_len(self) -> int:
        """Tokens in the tail page (0 without pages), without copying page_lens."""
        return self._page_lens[-1] if self._page_lens else 0

    @property
    def offset(self) -> int:
        """Tokens held (the context length)."""
        return self._offset

    # -- appends --------------------------------------------------------------
    def update_and_fetch_paged(
        self,
        key: mx.array,
        value: mx.array,
        mask_length: int | None = None,
        mask: mx.array | str | None = None,
    ) -> PagedKvMetadata:
        """Append key/value [1, H_kv, S, D] and return the metadata a paged kernel reads."""
        self.append(key, value, mask_length)
        return self.paged_metadata(mask=mask)

    def update_and_fetch(
        self,
        key: mx.array,
        value: mx.array,
        mask_length: int | None = None,
        mask: mx.array | str | None = None,
    ) -> tuple[mx.array, mx.array, int, mx.array | str | None]:
        """Dense-gather path: append, then (keys, values, offset, mask) with keys [1, H_kv, offset, D]."""
        self.append(key, value, mask_length)
        keys, values = self.gather_dense()
        return keys, values, self._offset, mask

    def append(self, key: mx.array, value: mx.array, mask_length: int | None = None) -> None:
        """Write a chunk into the tail page, then into new pages; on any failure nothing changes. A chunk that
        would take the context past MAX_CONTEXT or need pages the pool could not store is refused first
        (claim_token_slots' checks), as is one needing more than MAX_APPEND_PAGE_WRITES page writes."""
        self._pool.check_chunk(key, value)
        length = key.shape[2]
        if mask_length is not None and (not is_int(mask_length) or mask_length != length):
            raise ValueError(
                f"mask_length={mask_length!r} must be None or the chunk length S={length}{python_int_hint(mask_length)}"
            )
        self._check_claim(length, "key length S")
        pool_before = self._pool.checkpoint()
        cache_before = self.checkpoint()
        try:
            self._write_chunk(key, value)
        except BaseException:
            self._restore(pool_before, cache_before)
            raise

    def _restore(self, pool_before: PoolCheckpoint, cache_before: CacheCheckpoint) -> None:
        """Put the pool and this cache back to checkpoints taken before a failed append."""
        self._pool.rollback(pool_before)
        self.rollback(cache_before)

    def _write_chunk(self, key: mx.array, value: mx.array) -> None:
        """One pool write per page the chunk reaches; a chunk needing more than MAX_APPEND_PAGE_WRITES of them is
        refused before any position is claimed."""
        length, page_size = key.shape[2], self._pool.page_size
        writes = self._pages_opened_by(length) + (1 if self._page_ids and self._page_lens[-1] < page_size else 0)
        if writes > MAX_APPEND_PAGE_WRITES:
            raise ValueError(
                f"key length S={length} needs {writes} page writes of page_size={page_size}, more than the "
                f"{MAX_APPEND_PAGE_WRITES} one append makes (each is a lazy update holding host memory until "
                f"evaluated); append at most {(MAX_APPEND_PAGE_WRITES - 1) * page_size} tokens at a time"
            )
        written = 0
        for page_id, start, taken in self._claim_runs(key.shape[2]):
            stop = written + taken
            self._pool.write_page_slice(page_id, start, key[:, :, written:stop, :], value[:, :, written:stop, :])
            written = stop

    def _claim_runs(self, count: int) -> Iterator[tuple[int, int, int]]:
        """Take `count` token positions, tail page first (a new page only when the tail is full), yielding
        (page id, first slot, tokens) per page as each is claimed; the counts include them at once."""
        page_size = self._pool.page_size
        claimed = 0
        while claimed < count:
            self._open_page_if_full()
            start = self._page_lens[-1]
            taken = min(page_size - start, count - claimed)
            self._page_lens[-1] += taken
            self._offset += taken
            claimed += taken
            yield self._page_ids[-1], start, taken

    def _open_page_if_full(self) -> None:
        """Allocate a new tail page when there is none or the tail is full (the only place pages are added)."""
        if not self._page_ids or self._page_lens[-1] == self._pool.page_size:
            self._page_ids.append(self._pool.allocate_page())
            self._page_lens.append(0)
            self._pages_changed()

    def claim_token_slot(self) -> tuple[int, int]:
        """Take the next token position, tail page first (a new page only when the tail is full), and
        return (page id, slot) for the caller to write its K/V into. The counts include the token at once;
        a caller that fails before writing rolls the cache and the pool back (checkpoint / rollback).
        The one-token case of claim_token_slots, without its generator (a decode step claims one per
        request and layer)."""
        self._open_page_if_full()
        slot = self._page_lens[-1]
        self._page_lens[-1] = slot + 1
        self._offset += 1
        return self._page_ids[-1], slot

    def claim_token_slots(self, count: int) -> tuple[list[int], list[int]]:
        """claim_token_slot for `count` consecutive tokens: (page id of each, slot of each). A count that is
        not an int >= 0, that takes the context past what int32 context lengths hold, whose pages the pool
        could not store, or that is above MAX_CLAIM_TOKENS, raises ValueError before anything is claimed;
        after a failure past these checks the caller rolls back, as after claim_token_slot."""
        if not is_int(count) or count < 0:
            raise ValueError(f"count={reprlib.repr(count)} must be an int >= 0{python_int_hint(count)}")
        self._check_claim(count, "count")
        if count > MAX_CLAIM_TOKENS:
            raise ValueError(f"count={count} is more than the {MAX_CLAIM_TOKENS} positions one claim lists (a page id "
                             "and a slot per token); claim them in parts")
        page_ids: list[int] = []
        slots: list[int] = []
        for page_id, start, taken in self._claim_runs(count):
            page_ids += [page_id] * taken
            slots += range(start, start + taken)
        return page_ids, slots

    def _check_claim(self, count: int, name: str) -> None:
        """ValueError, changing nothing, unless `count` more positions fit: the context stays within MAX_CONTEXT
        (what int32 context lengths hold) and the pool could store the pages they open (check_room_for).
        `name` is the caller's word for the count."""
        if self._offset + count > MAX_CONTEXT:
            raise ValueError(f"{name}={count} would take the context from {self._offset} past {MAX_CONTEXT} "
                             "positions, the most int32 context_lens hold")
        self._pool.check_room_for(self._pages_opened_by(count))

    def _pages_opened_by(self, count: int) -> int:
        """New pages that `count` more positions take: those past the tail page's free slots."""
        page_size = self._pool.page_size
        tail_room = page_size - self._page_lens[-1] if self._page_ids else 0
        return -(-max(0, count - tail_room) // page_size)

    # -- metadata -------------------------------------------------------------
    def block_table(self, max_pages: int | None = None) -> mx.array:
        """int32 [1, max_pages] of this cache's page ids, -1 past them; max_pages defaults to num_pages."""
        width = table_width(max_pages, self.num_pages, self._pool.page_size)
        table = self._block_tables.get(width)
        if table is None:
            table = mx.array([self._page_ids + [-1] * (width - self.num_pages)], dtype=mx.int32)
            self._block_tables[width] = table
        return table

    def context_lens(self) -> mx.array:
        return mx.array([self._offset], dtype=mx.int32)

    def paged_metadata(
        self, max_pages: int | None = None, mask: mx.array | str | None = None
    ) -> PagedKvMetadata:
        key_pages, value_pages = self._pool.key_pages, self._pool.value_pages
        if key_pages is None or value_pages is None:
            raise ValueError("paged_metadata: the pool has no page storage yet (nothing was written to it)")
        return PagedKvMetadata(
            key_pages=key_pages,
            value_pages=value_pages,
            block_table=self.block_table(max_pages),
            context_lens=self.context_lens(),
            page_size=self._pool.page_size,
            mask=mask,
        )

    def gather_dense(self) -> tuple[mx.array, mx.array]:
        """This cache's tokens as dense (keys, values), each [1, H_kv, offset, D]."""
        key_pages, value_pages = self._pool.key_pages, self._pool.value_pages
        if key_pages is None or value_pages is None:
            raise ValueError("gather_dense: the pool has no page storage yet (nothing was written to it)")
        return self._gather(key_pages), self._gather(value_pages)

    def _gather(self, pages: mx.array) -> mx.array:
        _, num_heads, page_size, head_dim = pages.shape
        if not self._page_ids:
            return mx.zeros((1, num_heads, 0, head_dim), dtype=pages.dtype)
        picked = mx.take(pages, mx.array(self._page_ids, dtype=mx.int32), axis=0)
        tokens = picked.transpose(1, 0, 2, 3).reshape(num_heads, len(self._page_ids) * page_size, head_dim)
        return tokens[None, :, : self._offset, :]

    def materialize(self) -> None:
        """Evaluate pending page writes, without gathering this cache's tokens."""
        self._pool.materialize()

    # -- lifecycle --------------------------------------------------------------
    def release(self) -> None:
        """Free every page exactly once; the cache is then empty and can be appended to again."""
        self._free_pages(self._page_ids)
        self._page_ids, self._page_lens, self._offset = [], [], 0
        self._pages_changed()

    def rewind(self, n: int) -> None:
        """Drop the newest n tokens, freeing pages that no longer hold any."""
        if not is_int(n) or not 0 <= n <= self._offset:
            raise ValueError(
                f"rewind n={reprlib.repr(n)} must be an int in [0, offset={self._offset}]{python_int_hint(n)}"
            )
        if n == 0:
            return
        offset = self._offset - n
        page_size = self._pool.page_size
        keep = -(-offset // page_size)
        self._free_pages(self._page_ids[keep:])
        if keep < self.num_pages:
            del self._page_ids[keep:], self._page_lens[keep:]
            self._pages_changed()
        if keep:
            self._page_lens[-1] = offset - (keep - 1) * page_size
        self._offset = offset

    def _free_pages(self, page_ids: list[int]) -> None:
        not_live = [page_id for page_id in page_ids if not self._pool.is_live(page_id)]
        if not_live:
            raise ValueError(f"page_ids={not_live} of this cache are no longer live in its pool")
        for page_id in reversed(page_ids):
            self._pool.free_page(page_id)

    def _pages_changed(self) -> None:
        self._block_tables = {}
        self._page_tuple = None

    # -- undo -------------------------------------------------------------------
    def checkpoint(self) -> CacheCheckpoint:
        """The state to return to if the appends that follow fail (only appends may come in between)."""
        return CacheCheckpoint(
            num_pages=len(self._page_ids),
            tail_len=self.tail_len,
            offset=self._offset,
            block_tables=tuple(self._block_tables.items()),
        )

    def rollback(self, checkpoint: CacheCheckpoint) -> None:
        """Undo the appends since `checkpoint`: drop the pages they added and refill the old tail's length.
        The pool is rolled back separately. `checkpoint` must be a CacheCheckpoint (what `checkpoint()` returns)."""
        if not isinstance(checkpoint, CacheCheckpoint):
            raise ValueError(
                f"checkpoint={reprlib.repr(checkpoint)} must be a CacheCheckpoint from checkpoint(), "
                f"got {type_label(checkpoint)}"
            )
        count = checkpoint.num_pages
        if len(self._page_ids) < count or self._offset < checkpoint.offset:
            raise ValueError(
                f"checkpoint of {count} pages and offset {checkpoint.offset} is not before this cache's state "
                f"({len(self._page_ids)} pages, offset {self._offset}): only appends may follow a checkpoint"
            )
        del self._page_ids[count:]
        del self._page_lens[count:]
        if count:
            self._page_lens[-1] = checkpoint.tail_len
        self._offset = checkpoint.offset
        self._block_tables = dict(checkpoint.block_tables)
        self._page_tuple = None

