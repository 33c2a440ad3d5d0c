"""BatchingKvCache whose batch metadata comes from the scheduler step's shared table.

Only the metadata changes (the shared table, and the pool's whole storage in
place of the issued-row slices): appends, slot checks and all-or-nothing
rollback are BatchingKvCache's own. The override is of BatchingKvCache._metadata, the
one method that builds the batch's block table; tests/test_serving_variants.py
counts builds per step, so a renamed hook shows up as a failing test rather
than as silently rebuilt tables.

A decode step compiled as one call (serving/paged_decode_step.py) writes the
layer's K/V inside its graph, so it appends in two halves: `claim_decode_tokens`
runs the one-token append's checks and claims (nothing written yet), and
either `finish_decode_claim` takes the written storage or
`abandon_decode_claim` gives every claim back.
"""

from __future__ import annotations

from typing import NamedTuple

import mlx.core as mx

from pagecheck.impl import page_write
from pagecheck.impl.kv_cache import BatchingKvCache, slot_rows
from pagecheck.impl.page_pool import PoolCheckpoint, TinyKvPagedPool
from pagecheck.impl.paged_kv_cache import TinyKvPagedCache
from pagecheck.impl.paged_metadata import PagedKvMetadata
from pagecheck.serving.step_page_table import StepPageTable


class DecodeClaim(NamedTuple):
    """One layer's positions for a decode step's token, claimed before the step's graph writes them."""

    pool: TinyKvPagedPool
    active: list[tuple[int, TinyKvPagedCache]]
    pool_before: PoolCheckpoint
    # Where the B rows of K/V [B, H_kv, 1, D] go in storage. An empty slot's row repeats the first active
    # row's position and its K/V is that row's (`rows`), so the write keeps the shape [B, ...] whatever
    # the slots hold and writes every position with one value.
    index: page_write.TokenRowIndex
    rows: mx.array | None  # int32 [B], the K/V row each storage row takes; None: every row its own
    key_storage: mx.array
    value_storage: mx.array
    block_table: mx.array
    context_lens: mx.array


class StepBatchingKvCache(BatchingKvCache):
    def __init__(self, max_active_requests: int, table: StepPageTable, max_seq_len: int | None = None) -> None:
        super().__init__(max_active_requests, max_seq_len)
        self._table = table

    def _metadata(self, pool: TinyKvPagedPool, mask: mx.array | str | None) -> PagedKvMetadata:
        storage = pool.storage
        if storage is None:
            raise ValueError("the batch's pool has no page storage after the append")
        # The whole storage, not key_pages' slice of the issued rows: the table names issued pages only,
        # and a slice would be one more graph node per tensor and layer.
        key_pages, value_pages = storage
        block_table, context_lens = self._table_arrays(1)
        return PagedKvMetadata(
            key_pages=key_pages,
            value_pages=value_pages,
            block_table=block_table,
            context_lens=context_lens,
            page_size=pool.page_size,
            mask=mask,
        )

    def _table_arrays(self, width_step: int) -> tuple[mx.array, mx.array]:
        slots = self._requests
        rows = [() if cache is None else cache.page_id_tuple for cache in slots]
        lens = [0 if cache is None else cache.offset for cache in slots]
        return self._table.arrays(rows, lens, width_step)

    def claim_decode_tokens(self, shape: tuple[int, ...], dtype: mx.Dtype, width_step: int = 1) -> DecodeClaim:
        """update_and_fetch_paged's checks and claims for one token per active request, with keys and values
        shaped `shape` [B, H_kv, 1, D] of `dtype` that the caller has not built yet; the table's width is a
        multiple of `width_step`. Until finish_decode_claim or abandon_decode_claim, the claimed tokens count
        in the caches but their K/V is not in storage."""
        if len(shape) != 4 or shape[2] != 1:
            raise ValueError(f"keys shape={tuple(shape)} must be [B, H_kv, 1, D]: a decode claim is one token a row")
        active = self._check_batch_shape(shape, dtype, dtype, 1)
        pool = active[0][1].pool
        positions, pool_before = self._claim_one_token_each(pool, active)
        try:
            storage = pool.storage
            if storage is None:
                raise ValueError("the batch's pool has no page storage yet; prefill writes it first")
            pages, slots = [page for page, _ in positions], [slot for _, slot in positions]
            index = pool.token_rows_index(pages, slots, (len(active), *shape[1:]), dtype, dtype)
            rows = None
            if len(active) != shape[0]:
                # Each storage row b takes K/V row source[b]: its own where slot b is active, else the first
                # active slot's, written again at that slot's position.
                by_slot = dict(zip((slot for slot, _ in active), positions))
                first = active[0][0]
                source = tuple(slot if slot in by_slot else first for slot in range(shape[0]))
                index = page_write.token_row_index(
                    tuple(by_slot[slot][0] for slot in source), tuple(by_slot[slot][1] for slot in source), shape[1]
                )
                rows = slot_rows(source)
            block_table, context_lens = self._table_arrays(width_step)
        except BaseException:
            self._give_back_tokens(pool, active, pool_before)
            raise
        return DecodeClaim(pool, active, pool_before, index, rows, storage[0], storage[1], block_table, context_lens)

    def finish_decode_claim(self, claim: DecodeClaim, keys: mx.array, values: mx.array) -> None:
        """Take the storage the step's graph wrote at the claim's index (pages [capacity, H_kv, page, D])."""
        claim.pool.replace_storage(keys, values)
        self.HD = (keys.shape[1], keys.shape[3])

    def abandon_decode_claim(self, claim: DecodeClaim) -> None:
        """Give back every token of the claim, and its pages, as if it had never been made."""
        self._give_back_tokens(claim.pool, claim.active, claim.pool_before)
