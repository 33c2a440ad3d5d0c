"""BatchingKvCache: a fixed set of decode slots, each holding one request's paged cache for one layer.

A batched append writes row b of keys/values into the request in slot b (a
one-token step, the decode case, writes every request's token in a single
storage update) and returns one PagedKvMetadata for the whole batch: the shared pool's pages, an
int32 block table [max_active_requests, widest row] padded with -1, and int32
context lengths. A slot with no request is a row of -1 with context 0, and its
keys/values rows are ignored. Every check runs before any request changes, and
an append that fails part-way is undone for every request.
"""

from __future__ import annotations

from functools import lru_cache

import mlx.core as mx

from pagecheck.impl.page_pool import PoolCheckpoint, TinyKvPagedPool, check_kv_pair, is_int, python_int_hint
from pagecheck.impl.paged_kv_cache import TinyKvPagedCache
from pagecheck.impl.paged_metadata import PagedKvMetadata

__all__ = ["BatchingKvCache"]

# Slot-row index arrays kept for reuse across the layers of a step.
SLOT_ROWS_CACHE_SIZE = 16


@lru_cache(maxsize=SLOT_ROWS_CACHE_SIZE)
def slot_rows(slots: tuple[int, ...]) -> mx.array:
    """int32 [len(slots)] of these slot ids, one array per distinct tuple (kept across the layers of a step)."""
    return mx.array(slots, dtype=mx.int32)


# Slots a batch may have: each is a list entry made up front, so 10**11 was a MemoryError.
MAX_ACTIVE_REQUESTS = 1 << 16


class BatchingKvCache:
    def __init__(self, max_active_requests: int, max_seq_len: int | None = None) -> None:
        if not is_int(max_active_requests) or not 0 < max_active_requests <= MAX_ACTIVE_REQUESTS:
            raise ValueError(
                f"max_active_requests={max_active_requests!r} must be a positive integer up to {MAX_ACTIVE_REQUESTS}"
                f"{python_int_hint(max_active_requests)}"
            )
        if max_seq_len is not None and (not is_int(max_seq_len) or max_seq_len <= 0):
            raise ValueError(
                f"max_seq_len={max_seq_len!r} must be None or a positive integer{python_int_hint(max_seq_len)}"
            )
        self.max_active_requests = max_active_requests
        self.max_seq_len = max_seq_len
        self._requests: list[TinyKvPagedCache | None] = [None] * max_active_requests
        # (H_kv, D) of the last successful batched append; tiny-llm's batch cache exposes it as HD.
        self.HD: tuple[int, int] | None = None

    @property
    def active_request_ids(self) -> list[int]:
        return [slot for slot, cache in enumerate(self._requests) if cache is not None]

    def slot_caches(self) -> list[TinyKvPagedCache | None]:
        """The cache in each slot, None where the slot is empty (a copy of the slot list)."""
        return list(self._requests)

    def request(self, id: int) -> TinyKvPagedCache:
        """The cache held in slot `id`."""
        self._check_slot(id)
        cache = self._requests[id]
        if cache is None:
            raise ValueError(f"id={id} is an empty slot")
        return cache

    def add_request(self, prefilled: TinyKvPagedCache, id: int) -> None:
        """Place a request's (already prefilled) cache in slot `id`."""
        self._check_slot(id)
        if not isinstance(prefilled, TinyKvPagedCache):
            raise ValueError(f"prefilled must be a TinyKvPagedCache, got {type(prefilled).__name__}")
        if self._requests[id] is not None:
            raise ValueError(f"id={id} already holds a request; remove it first")
        if any(cache is prefilled for cache in self._requests):
            raise ValueError(f"prefilled cache is already in slot {self._requests.index(prefilled)}")
        if self.max_seq_len is not None and prefilled.offset > self.max_seq_len:
            raise ValueError(f"prefilled offset={prefilled.offset} exceeds max_seq_len={self.max_seq_len}")
        self._requests[id] = prefilled

    def remove_request(self, id: int) -> None:
        """Empty slot `id` and return the request's pages to its pool."""
        cache = self.request(id)
        cache.release()
        self._requests[id] = None

    def update_and_fetch_paged(
        self,
        keys: mx.array,
        values: mx.array,
        mask_length: int | None = None,
        mask: mx.array | str | None = None,
    ) -> PagedKvMetadata:
        """Append row b of keys/values [B, H_kv, L, D] to slot b's request; metadata for the batch."""
        active = self._check_batch(keys, values, mask_length)
        pool = active[0][1].pool
        if keys.shape[2] == 1:
            self._append_tokens(pool, active, keys, values)
        else:
            # Before any append: one request's new page could otherwise be another's page freed behind its back.
            for slot, cache in active:
                pool.check_live_pages(cache.page_ids, f"the request in slot {slot}")
            pool_before = pool.checkpoint()
            caches_before = [cache.checkpoint() for _, cache in active]
            try:
                for slot, cache in active:
                    cache.append(keys[slot : slot + 1], values[slot : slot + 1])
            except BaseException:
                pool.rollback(pool_before)
                for (_, cache), before in zip(active, caches_before):
                    cache.rollback(before)
                raise
        self.HD = (keys.shape[1], keys.shape[3])
        return self._metadata(pool, mask)

    def _append_tokens(
        self, pool: TinyKvPagedPool, active: list[tuple[int, TinyKvPagedCache]], keys: mx.array, values: mx.array
    ) -> None:
        """One token per active request: positions claimed in slot order, then one write for all of them."""
        positions, pool_before = self._claim_one_token_each(pool, active)
        try:
            slots = tuple(slot for slot, _ in active)
            # [B, H_kv, 1, D] is already the pool's token-row layout (B rows of one token).
            key_rows, value_rows = keys, values
            if len(slots) != keys.shape[0]:
                rows = slot_rows(slots)
                key_rows, value_rows = mx.take(key_rows, rows, axis=0), mx.take(value_rows, rows, axis=0)
            pool.write_token_rows([page for page, _ in positions], [slot for _, slot in positions], key_rows, value_rows)
        except BaseException:
            self._give_back_tokens(pool, active, pool_before)
            raise

    @staticmethod
    def _claim_one_token_each(
        pool: TinyKvPagedPool, active: list[tuple[int, TinyKvPagedCache]]
    ) -> tuple[list[tuple[int, int]], PoolCheckpoint]:
        """Claim the next position of every active request, in slot order: ((page id, slot) of each, the pool
        before). All or nothing: _give_back_tokens undoes the claims, which is cheaper than a checkpoint per
        request for the one-token case that every decode step and layer takes."""
        pool_before = pool.checkpoint()
        positions: list[tuple[int, int]] = []
        try:
            for _, cache in active:
                positions.append(cache.claim_token_slot())
        except BaseException:
            BatchingKvCache._give_back_tokens(pool, active[: len(positions)], pool_before)
            raise
        return positions, pool_before

    @staticmethod
    def _give_back_tokens(
        pool: TinyKvPagedPool, active: list[tuple[int, TinyKvPagedCache]], pool_before: PoolCheckpoint
    ) -> None:
        """Undo _claim_one_token_each: rewind(1) gives back exactly one claim (its page included), then the
        pool returns to its checkpoint."""
        for _, cache in reversed(active):
            cache.rewind(1)
        pool.rollback(pool_before)

    def _check_batch(
        self, keys: mx.array, values: mx.array, mask_length: int | None
    ) -> list[tuple[int, TinyKvPagedCache]]:
        check_kv_pair(keys, values, ("keys", "values"))
        return self._check_batch_shape(tuple(keys.shape), keys.dtype, values.dtype, mask_length)

    def _check_batch_shape(
        self, shape: tuple[int, ...], dtype: mx.Dtype, value_dtype: mx.Dtype, mask_length: int | None
    ) -> list[tuple[int, TinyKvPagedCache]]:
        """The batch checks of keys/values shaped `shape` with these dtypes; the active (slot, cache) pairs."""
        if len(shape) != 4 or shape[0] != self.max_active_requests:
            raise ValueError(
                f"keys shape={tuple(shape)} must be [B, H_kv, L, D] with B = max_active_requests="
                f"{self.max_active_requests}"
            )
        length = shape[2]
        if mask_length is not None and (not is_int(mask_length) or mask_length != length):
            raise ValueError(
                f"mask_length={mask_length!r} must be None or the chunk length L={length}{python_int_hint(mask_length)}"
            )
        active = [(slot, cache) for slot, cache in enumerate(self._requests) if cache is not None]
        if not active:
            raise ValueError("the batch has no active requests; add_request first")
        pool = active[0][1].pool
        for slot, cache in active:
            if cache.pool is not pool:
                raise ValueError(
                    f"all active requests must share one page pool; slot {slot} uses a different pool "
                    f"than slot {active[0][0]}"
                )
            if self.max_seq_len is not None and cache.offset + length > self.max_seq_len:
                raise ValueError(
                    f"slot {slot} would hold {cache.offset + length} tokens, over max_seq_len={self.max_seq_len}"
                )
        # Rows share shape and dtype, so one row's geometry checks them all against the pool.
        pool.check_chunk_shape((1, *shape[1:]), dtype, value_dtype)
        return active

    def _metadata(self, pool: TinyKvPagedPool, mask: mx.array | str | None) -> PagedKvMetadata:
        width = max(cache.num_pages for cache in self._requests if cache is not None)
        rows = [
            [-1] * width if cache is None else cache.page_ids + [-1] * (width - cache.num_pages)
            for cache in self._requests
        ]
        lens = [0 if cache is None else cache.offset for cache in self._requests]
        key_pages, value_pages = pool.key_pages, pool.value_pages
        if key_pages is None or value_pages is None:
            raise ValueError("the batch's pool has no page storage after the append")
        return PagedKvMetadata(
            key_pages=key_pages,
            value_pages=value_pages,
            block_table=mx.array(rows, dtype=mx.int32),
            context_lens=mx.array(lens, dtype=mx.int32),
            page_size=pool.page_size,
            mask=mask,
        )

    def _check_slot(self, id: int) -> None:
        if not is_int(id) or not 0 <= id < self.max_active_requests:
            raise ValueError(f"id={id!r} must be a slot in [0, {self.max_active_requests}){python_int_hint(id)}")

