"""A course-conformant Week 3 subject, written from the course's public Day 3/4 tests and skeleton.

It does what the course's tests ask and nothing more: float32 and bfloat16
only (float16 is declined with a ValueError naming it, before any work), the
course's error phrases ("existing page storage dtype", "same shape", "share
one page pool", "nonnegative", "not covered", "outside physical page
storage", "aliased", "must use the -1 sentinel", "positive integer", "must be
zero or at least query length"), zero-initialised page storage that starts at
INITIAL_CAPACITY rows and doubles, the pool's counters and `reset`, block
tables reused until the page ids change, appends that roll back on failure.

The attention is plain mlx.core, one request at a time: gather that request's
own pages, scores in float32, softmax with the row maximum subtracted, the
causal mask aligned to the end of the context. It is a test subject: the
invariants suite must pass it with no failure (tests/test_course_map.py).
It imports only mlx, numpy and the standard library.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mlx.core as mx

SUPPORTED_DTYPES = (mx.float32, mx.bfloat16)
INITIAL_CAPACITY = 4  # page rows of storage created by the first write
SENTINEL = -1  # a block-table entry past a row's context


def _dtype_name(dtype: mx.Dtype) -> str:
    return str(dtype).rsplit(".", 1)[-1]


def _check_supported(what: str, dtype: mx.Dtype) -> None:
    if dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"{what} supports float32 or bfloat16, got {_dtype_name(dtype)}")


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


@dataclass
class PagedKvMetadata:
    key_pages: mx.array
    value_pages: mx.array
    block_table: mx.array
    context_lens: mx.array
    page_size: int
    mask: mx.array | str | None = None


# ---------------------------------------------------------------------------- pool


class TinyKvPagedPool:
    """Page ids and one key and one value store [capacity, H_kv, page_size, D] shared by a layer's caches."""

    def __init__(self, page_size: int = 128) -> None:
        if not _is_int(page_size) or page_size <= 0:
            raise ValueError(f"page_size must be a positive integer, got {page_size!r}")
        self.page_size = page_size
        self._clear()

    def _clear(self) -> None:
        self._key_store: mx.array | None = None
        self._value_store: mx.array | None = None
        self._num_issued = 0
        self._free: list[int] = []
        self.reused_page_allocations = 0
        self.storage_growths = 0
        self.copied_pages_on_growth = 0
        self.copied_bytes_on_growth = 0

    # -- counts -----------------------------------------------------------------
    @property
    def num_pages(self) -> int:
        """Page ids issued so far, live or free."""
        return self._num_issued

    @property
    def num_free_pages(self) -> int:
        return len(self._free)

    @property
    def free_page_ids(self) -> list[int]:
        return list(self._free)

    @property
    def used_page_ids(self) -> list[int]:
        free = set(self._free)
        return [page_id for page_id in range(self._num_issued) if page_id not in free]

    @property
    def capacity(self) -> int:
        return 0 if self._key_store is None else self._key_store.shape[0]

    @property
    def storage_nbytes(self) -> int:
        return 0 if self._key_store is None else self._key_store.nbytes + self._value_store.nbytes

    @property
    def dtype(self) -> mx.Dtype | None:
        return None if self._key_store is None else self._key_store.dtype

    @property
    def key_pages(self) -> mx.array | None:
        """The issued pages' keys [num_pages, H_kv, page_size, D], or None before the first write."""
        return None if self._key_store is None else self._key_store[: self._num_issued]

    @property
    def value_pages(self) -> mx.array | None:
        return None if self._value_store is None else self._value_store[: self._num_issued]

    # -- allocation ---------------------------------------------------------------
    def allocate_page(self) -> int:
        """The most recently freed id, or a fresh one (growing the storage when it is full)."""
        if self._free:
            self.reused_page_allocations += 1
            return self._free.pop()
        page_id = self._num_issued
        if self._key_store is not None and page_id >= self.capacity:
            self._grow(page_id + 1)
        self._num_issued += 1
        return page_id

    def free_page(self, page_id: int) -> None:
        self._check_issued(page_id)
        if page_id in self._free:
            raise ValueError(f"Page {page_id} is already free")
        self._free.append(page_id)

    def reset(self) -> None:
        """Drop every page, the storage and the counters; only a pool with no live page can be reset."""
        live = self.used_page_ids
        if live:
            raise ValueError(f"cannot reset the pool: pages {live} are still live")
        self._clear()

    # -- data ---------------------------------------------------------------------
    def check_chunk(self, key: mx.array, value: mx.array) -> None:
        """Reject a key/value chunk [1, H_kv, S, D] this pool cannot store, before anything changes."""
        for name, array in (("key", key), ("value", value)):
            if not isinstance(array, mx.array):
                raise ValueError(f"{name} must be an mlx.core.array, got {type(array).__name__}")
            _check_supported(f"paged KV storage ({name} dtype)", array.dtype)
        if key.shape != value.shape:
            raise ValueError(f"key and value must have the same shape, got {key.shape} and {value.shape}")
        if key.dtype != value.dtype:
            raise ValueError(f"key and value must have the same dtype, got {key.dtype} and {value.dtype}")
        if key.ndim != 4 or key.shape[0] != 1 or key.shape[2] == 0:
            raise ValueError(f"key shape={key.shape} must be [1, H_kv, S, D] with S >= 1")
        if self._key_store is not None:
            if key.dtype != self._key_store.dtype:
                raise ValueError(
                    f"key dtype {_dtype_name(key.dtype)} does not match the existing page storage dtype "
                    f"{_dtype_name(self._key_store.dtype)}"
                )
            _, heads, _, dim = self._key_store.shape
            if (key.shape[1], key.shape[3]) != (heads, dim):
                raise ValueError(f"key shape={key.shape} does not match the page storage [*, {heads}, *, {dim}]")

    def write_page_slice(self, page_id: int, start: int, key: mx.array, value: mx.array) -> None:
        """Store key/value [1, H_kv, S, D] in slots start .. start + S - 1 of a live page."""
        self.check_chunk(key, value)
        self._check_live(page_id)
        length = key.shape[2]
        if not _is_int(start) or not 0 <= start < self.page_size:
            raise ValueError(f"start={start!r} is outside a page of size {self.page_size}")
        if start + length > self.page_size:
            raise ValueError(f"write of {length} tokens at start={start} runs past the page end ({self.page_size})")
        if self._key_store is None:
            self._create_storage(key, max(INITIAL_CAPACITY, self._num_issued))
        at = mx.array([page_id, 0, start, 0])
        self._key_store = mx.slice_update(self._key_store, key, at, axes=(0, 1, 2, 3))
        self._value_store = mx.slice_update(self._value_store, value, at, axes=(0, 1, 2, 3))

    def read_page(self, page_id: int) -> tuple[mx.array, mx.array]:
        """A live page's keys and values, each [1, H_kv, page_size, D]."""
        self._check_live(page_id)
        if self._key_store is None:
            raise ValueError(f"page_id={page_id} has no storage yet: nothing was written to this pool")
        return self._key_store[page_id : page_id + 1], self._value_store[page_id : page_id + 1]

    # -- undo ---------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """Everything rollback needs; the stores are replaced, never written in place, so keeping them is enough."""
        state = dict(vars(self))
        state["_free"] = list(self._free)
        return state

    def rollback(self, state: dict[str, Any]) -> None:
        vars(self).clear()
        vars(self).update(state)

    # -- internals ----------------------------------------------------------------
    def _check_issued(self, page_id: int) -> None:
        if not _is_int(page_id) or not 0 <= page_id < self._num_issued:
            raise ValueError(f"page_id={page_id!r} was never issued by this pool ({self._num_issued} issued)")

    def _check_live(self, page_id: int) -> None:
        self._check_issued(page_id)
        if page_id in self._free:
            raise ValueError(f"page_id={page_id} is free; only a live page can be written or read")

    def _create_storage(self, like: mx.array, rows: int) -> None:
        shape = (rows, like.shape[1], self.page_size, like.shape[3])
        self._key_store = mx.zeros(shape, dtype=like.dtype)
        self._value_store = mx.zeros(shape, dtype=like.dtype)
        self.storage_growths += 1

    def _grow(self, needed: int) -> None:
        old_rows = self.capacity
        rows = max(needed, 2 * old_rows)
        padding = mx.zeros((rows - old_rows, *self._key_store.shape[1:]), dtype=self._key_store.dtype)
        self.copied_bytes_on_growth += self.storage_nbytes
        self._key_store = mx.concatenate([self._key_store, padding])
        self._value_store = mx.concatenate([self._value_store, padding])
        self.storage_growths += 1
        self.copied_pages_on_growth += old_rows


# ---------------------------------------------------------------------------- cache


class TinyKvPagedCache:
    """One request's K/V for one layer: an ordered list of pool pages and how many tokens each holds."""

    def __init__(self, pool: TinyKvPagedPool) -> None:
        self.pool = pool
        self.page_ids: list[int] = []
        self.page_lens: list[int] = []
        self.offset = 0
        self._table_key: tuple[tuple[int, ...], int] | None = None
        self._table: mx.array | None = None

    @property
    def num_pages(self) -> int:
        return len(self.page_ids)

    # -- appends --------------------------------------------------------------------
    def update_and_fetch(
        self, key: mx.array, value: mx.array, mask_length: int | None = None, mask: mx.array | str | None = None
    ) -> tuple[mx.array, mx.array, int, mx.array | str | None]:
        """Append, then return this request's keys and values dense [1, H_kv, offset, D], the offset and the mask."""
        self.append(key, value)
        keys, values = self.gather_dense()
        return keys, values, self.offset, mask

    def update_and_fetch_paged(
        self, key: mx.array, value: mx.array, mask_length: int | None = None, mask: mx.array | str | None = None
    ) -> PagedKvMetadata:
        self.append(key, value)
        return self.paged_metadata(mask=mask)

    def append(self, key: mx.array, value: mx.array) -> None:
        """Fill the tail page, then new pages; if anything fails, the pool and this cache are put back."""
        self.pool.check_chunk(key, value)
        pool_before = self.pool.snapshot()
        cache_before = (list(self.page_ids), list(self.page_lens), self.offset)
        try:
            self._write(key, value)
        except BaseException:
            self.pool.rollback(pool_before)
            self.page_ids, self.page_lens, self.offset = cache_before
            raise

    def _write(self, key: mx.array, value: mx.array) -> None:
        page_size = self.pool.page_size
        length = key.shape[2]
        written = 0
        while written < length:
            if not self.page_ids or self.page_lens[-1] == page_size:
                self.page_ids.append(self.pool.allocate_page())
                self.page_lens.append(0)
            start = self.page_lens[-1]
            stop = written + min(page_size - start, length - written)
            self.pool.write_page_slice(self.page_ids[-1], start, key[:, :, written:stop], value[:, :, written:stop])
            self.page_lens[-1] += stop - written
            self.offset += stop - written
            written = stop

    # -- metadata ---------------------------------------------------------------------
    def block_table(self, max_pages: int | None = None) -> mx.array:
        """int32 [1, max_pages]: this cache's page ids, then -1; the same array until the page ids change."""
        width = self.num_pages if max_pages is None else max_pages
        if not _is_int(width) or width < self.num_pages:
            raise ValueError(f"max_pages={max_pages!r} must be an integer >= num_pages={self.num_pages}")
        key = (tuple(self.page_ids), width)
        if self._table_key != key:
            self._table = mx.array([self.page_ids + [SENTINEL] * (width - self.num_pages)], dtype=mx.int32)
            self._table_key = key
        return self._table

    def context_lens(self) -> mx.array:
        return mx.array([self.offset], dtype=mx.int32)

    def paged_metadata(self, max_pages: int | None = None, mask: mx.array | str | None = None) -> PagedKvMetadata:
        if self.pool.key_pages is None:
            raise ValueError("paged_metadata: the pool has no page storage yet (nothing was written to it)")
        return PagedKvMetadata(
            self.pool.key_pages, self.pool.value_pages, self.block_table(max_pages), self.context_lens(),
            self.pool.page_size, mask,
        )

    def gather_dense(self) -> tuple[mx.array, mx.array]:
        """This request's tokens, dense, each [1, H_kv, offset, D]."""
        if self.pool.key_pages is None:
            raise ValueError("gather_dense: the pool has no page storage yet (nothing was written to it)")
        return self._gather(self.pool.key_pages), self._gather(self.pool.value_pages)

    def _gather(self, pages: mx.array) -> mx.array:
        _, num_heads, page_size, head_dim = pages.shape
        picked = pages[mx.array(self.page_ids, dtype=mx.int32)] if self.page_ids else pages[:0]
        tokens = picked.transpose(1, 0, 2, 3).reshape(num_heads, self.num_pages * page_size, head_dim)
        return tokens[None, :, : self.offset]

    def materialize(self) -> None:
        """Evaluate the pool's page storage in one call, without gathering this request's tokens."""
        if self.pool.key_pages is not None:
            mx.eval(self.pool.key_pages, self.pool.value_pages)

    # -- lifecycle ----------------------------------------------------------------------
    def rewind(self, n: int) -> None:
        """Forget the newest n tokens; pages left empty go back to the pool, newest first."""
        if not _is_int(n) or not 0 <= n <= self.offset:
            raise ValueError(f"rewind n={n!r} must be an integer in [0, offset={self.offset}]")
        left = n
        while left:
            drop = min(left, self.page_lens[-1])
            self.page_lens[-1] -= drop
            left -= drop
            if self.page_lens[-1] == 0:
                self.pool.free_page(self.page_ids.pop())
                self.page_lens.pop()
        self.offset -= n

    def release(self) -> None:
        """Give every page back once, newest first (so LIFO reuse hands them out in their old order)."""
        for page_id in reversed(self.page_ids):
            self.pool.free_page(page_id)
        self.page_ids, self.page_lens, self.offset = [], [], 0


# ---------------------------------------------------------------------------- batch


class BatchingKvCache:
    """Slots of requests whose caches share one pool, appended to together and read as one batch of metadata."""

    def __init__(self, max_active_requests: int, max_seq_len: int | None = None) -> None:
        if not _is_int(max_active_requests) or max_active_requests <= 0:
            raise ValueError(f"max_active_requests must be a positive integer, got {max_active_requests!r}")
        self.max_active_requests = max_active_requests
        self.max_seq_len = max_seq_len
        self.kv_caches: list[TinyKvPagedCache | None] = [None] * max_active_requests
        self.HD: tuple[int, int] | None = None  # (H_kv, D) of the rows appended so far

    def add_request(self, prefilled: TinyKvPagedCache, id: int) -> None:
        self._check_slot(id)
        if self.kv_caches[id] is not None:
            raise ValueError(f"slot id={id} already holds a request")
        self.kv_caches[id] = prefilled

    def remove_request(self, id: int) -> None:
        self._check_slot(id)
        if self.kv_caches[id] is None:
            raise ValueError(f"slot id={id} holds no request")
        self.kv_caches[id] = None

    def update_and_fetch_paged(
        self, keys: mx.array, values: mx.array, mask_length: int | None = None, mask: mx.array | str | None = None
    ) -> PagedKvMetadata:
        """Append row b of keys/values [B, H_kv, S, D] to slot b's request; return the batch's metadata."""
        active = [slot for slot, cache in enumerate(self.kv_caches) if cache is not None]
        if not active:
            raise ValueError("update_and_fetch_paged needs at least one active request")
        if keys.shape != values.shape:
            raise ValueError(f"keys and values must have the same shape, got {keys.shape} and {values.shape}")
        if keys.ndim != 4 or keys.shape[0] != self.max_active_requests:
            raise ValueError(f"keys shape={keys.shape} must be [max_active_requests={self.max_active_requests}, H, S, D]")
        pools = {id(self.kv_caches[slot].pool) for slot in active}
        if len(pools) != 1:
            raise ValueError(f"the active requests must share one page pool; slots {active} use {len(pools)} pools")
        length = keys.shape[2]
        for slot in active:
            if self.max_seq_len is not None and self.kv_caches[slot].offset + length > self.max_seq_len:
                raise ValueError(
                    f"slot {slot}: context {self.kv_caches[slot].offset} + {length} exceeds max_seq_len={self.max_seq_len}"
                )
        pool = self.kv_caches[active[0]].pool
        pool.check_chunk(keys[0:1], values[0:1])
        pool_before = pool.snapshot()
        caches_before = {slot: (list(c.page_ids), list(c.page_lens), c.offset) for slot, c in self._active_caches()}
        try:
            for slot in active:
                self.kv_caches[slot].append(keys[slot : slot + 1], values[slot : slot + 1])
        except BaseException:
            pool.rollback(pool_before)
            for slot, cache in self._active_caches():
                cache.page_ids, cache.page_lens, cache.offset = caches_before[slot]
            raise
        self.HD = (keys.shape[1], keys.shape[3])
        return self.paged_metadata(mask)

    def paged_metadata(self, mask: mx.array | str | None = None) -> PagedKvMetadata:
        caches = self._active_caches()
        width = max(cache.num_pages for _, cache in caches)
        table = [[SENTINEL] * width for _ in range(self.max_active_requests)]
        lens = [0] * self.max_active_requests
        for slot, cache in caches:
            table[slot][: cache.num_pages] = cache.page_ids
            lens[slot] = cache.offset
        pool = caches[0][1].pool
        return PagedKvMetadata(
            pool.key_pages, pool.value_pages, mx.array(table, dtype=mx.int32), mx.array(lens, dtype=mx.int32),
            pool.page_size, mask,
        )

    def _active_caches(self) -> list[tuple[int, TinyKvPagedCache]]:
        return [(slot, cache) for slot, cache in enumerate(self.kv_caches) if cache is not None]

    def _check_slot(self, id: int) -> None:
        if not _is_int(id) or not 0 <= id < self.max_active_requests:
            raise ValueError(f"slot id={id!r} is not in [0, {self.max_active_requests})")


# ---------------------------------------------------------------------------- attention


def _check_metadata(table: list[list[int]], lens: list[int], num_queries: int, page_size: int, num_pages: int) -> None:
    """The block table and context lengths, in the order the course's messages expect."""
    for row, n in enumerate(lens):
        if n < 0:
            raise ValueError(f"context_lens[{row}]={n} must be nonnegative")
    width = len(table[0]) if table else 0
    for row, n in enumerate(lens):
        live = -(-n // page_size)
        if live > width:
            raise ValueError(f"context_lens[{row}]={n} needs {live} pages: not covered by block_table width {width}")
    owner: dict[int, int] = {}
    for row, n in enumerate(lens):
        live = -(-n // page_size)
        for col in range(live):
            page = table[row][col]
            if not 0 <= page < num_pages:
                raise ValueError(
                    f"block_table[{row}, {col}]={page}: live page id is outside physical page storage [0, {num_pages})"
                )
            if page in owner:
                raise ValueError(f"block_table[{row}, {col}]={page}: live page id is aliased (row {owner[page]} uses it)")
            owner[page] = row
        for col in range(live, width):
            if table[row][col] != SENTINEL:
                raise ValueError(
                    f"block_table[{row}, {col}]={table[row][col]} is past context {n} and must use the -1 sentinel"
                )
    for row, n in enumerate(lens):
        if 0 < n < num_queries:
            raise ValueError(f"context_lens[{row}]={n} must be zero or at least query length L={num_queries}")


def _check_inputs(
    query: mx.array, key_pages: mx.array, value_pages: mx.array, block_table: mx.array, context_lens: mx.array,
    page_size: int, mask: mx.array | str | None,
) -> tuple[list[list[int]], list[int]]:
    for name, array in (("query", query), ("key_pages", key_pages), ("value_pages", value_pages)):
        _check_supported(f"paged_attention ({name} dtype)", array.dtype)
    if not _is_int(page_size) or page_size <= 0:
        raise ValueError(f"page_size must be a positive integer, got {page_size!r}")
    if mask is not None and not (isinstance(mask, str) and mask == "causal"):
        raise ValueError(f"mask={mask!r} must be None or 'causal'")
    if query.ndim != 4 or key_pages.ndim != 4:
        raise ValueError(f"query shape={query.shape} and key_pages shape={key_pages.shape} must both have 4 axes")
    if key_pages.shape != value_pages.shape:
        raise ValueError(f"key_pages and value_pages must have the same shape, got {key_pages.shape} and {value_pages.shape}")
    if not query.dtype == key_pages.dtype == value_pages.dtype:
        raise ValueError(f"dtypes differ: query {query.dtype}, key_pages {key_pages.dtype}, value_pages {value_pages.dtype}")
    batch, num_q_heads, _, head_dim = query.shape
    _, num_kv_heads, slots, kv_dim = key_pages.shape
    if slots != page_size:
        raise ValueError(f"key_pages page axis={slots} differs from page_size={page_size}")
    if kv_dim != head_dim:
        raise ValueError(f"key_pages head dim={kv_dim} differs from query head dim={head_dim}")
    if num_q_heads % num_kv_heads:
        raise ValueError(f"query heads H_q={num_q_heads} must be a multiple of kv heads H_kv={num_kv_heads}")
    for name, array in (("block_table", block_table), ("context_lens", context_lens)):
        if not mx.issubdtype(array.dtype, mx.integer):
            raise ValueError(f"{name} dtype={array.dtype} must be an integer type")
    if block_table.ndim != 2 or block_table.shape[0] != batch:
        raise ValueError(f"block_table shape={block_table.shape} must be [B={batch}, max_pages]")
    if context_lens.shape != (batch,):
        raise ValueError(f"context_lens shape={context_lens.shape} must be [B={batch}]")
    table, lens = block_table.tolist(), context_lens.tolist()
    _check_metadata(table, lens, query.shape[2], page_size, key_pages.shape[0])
    return table, lens


def _attend(query: mx.array, keys: mx.array, values: mx.array, scale: float, causal: bool) -> mx.array:
    """One request: query [H_q, L, D] over keys/values [H_kv, S, D], in float32."""
    num_q_heads, num_queries, head_dim = query.shape
    num_kv_heads, context, _ = keys.shape
    group = num_q_heads // num_kv_heads
    grouped = query.astype(mx.float32).reshape(num_kv_heads, group, num_queries, head_dim)
    scores = (grouped @ keys.astype(mx.float32)[:, None].swapaxes(-1, -2)) * scale  # [H_kv, group, L, S]
    if causal:
        # Query row i is position context - L + i and sees keys up to it.
        rows = mx.arange(num_queries)[:, None] + (context - num_queries)
        scores = mx.where(mx.arange(context)[None, :] <= rows, scores, -mx.inf)
    scores = scores - scores.max(axis=-1, keepdims=True)
    weights = mx.exp(scores)
    weights = weights / weights.sum(axis=-1, keepdims=True)
    out = weights @ values.astype(mx.float32)[:, None]
    return out.reshape(num_q_heads, num_queries, head_dim)


def paged_attention(
    query: mx.array,
    key_pages: mx.array,
    value_pages: mx.array,
    block_table: mx.array,
    context_lens: mx.array,
    page_size: int,
    scale: float | None = None,
    mask: mx.array | str | None = None,
) -> mx.array:
    """Attention of query [B, H_q, L, D] over each row's pages [P, H_kv, page_size, D]; rows of context 0 give zeros."""
    table, lens = _check_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask)
    batch, num_q_heads, num_queries, head_dim = query.shape
    scale = head_dim**-0.5 if scale is None else scale
    rows = []
    for row, n in enumerate(lens):
        if n == 0:
            rows.append(mx.zeros((num_q_heads, num_queries, head_dim), dtype=mx.float32))
            continue
        pages = mx.array(table[row][: -(-n // page_size)], dtype=mx.int32)
        keys = key_pages[pages].transpose(1, 0, 2, 3).reshape(key_pages.shape[1], -1, head_dim)[:, :n]
        values = value_pages[pages].transpose(1, 0, 2, 3).reshape(value_pages.shape[1], -1, head_dim)[:, :n]
        rows.append(_attend(query[row], keys, values, scale, mask == "causal"))
    return mx.stack(rows).astype(query.dtype)
