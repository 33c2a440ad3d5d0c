"""BatchingKvCache whose batch metadata comes from the scheduler step's shared table.

Only the metadata changes (the shared table, and the pool's whole storage in
place of the issued-row slices): appends, slot checks and all-or-nothing
rollback are BatchingKvCache's own. The override is of BatchingKvCache._metadata, the
one method that builds the batch's block table; tests/test_serving_variants.py
counts builds per step, so a renamed hook shows up as a failing test rather
than as silently rebuilt tables.

A decode step compiled as one call (serving/paged_step.py) writes the layer's
K/V inside its graph, so it appends in two halves (serving/step_claim.py):
`claim_tokens` runs the one-token append's checks and claims, then
`finish_claim` or `abandon_claim`. The write keeps the batch's shape whatever
the slots hold: an empty slot's row goes to a spare position that nothing
reads before it is written again (the slot after an active request's newest
token in its tail page, else a page no request holds), so the step writes the
batch's K/V as computed, with no per-layer gather. Only where no position is
spare does an empty slot's row repeat the first active row's position and K/V
(a gather of the K/V rows in every layer).
"""

from __future__ import annotations

import mlx.core as mx

from pagecheck.impl import page_write
from pagecheck.impl.kv_cache import BatchingKvCache, slot_rows
from pagecheck.impl.page_pool import TinyKvPagedPool
from pagecheck.impl.paged_kv_cache import TinyKvPagedCache
from pagecheck.impl.paged_metadata import PagedKvMetadata
from pagecheck.serving.step_claim import StepClaim
from pagecheck.serving.step_page_table import StepPageTable


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

    def claim_tokens(self, shape: tuple[int, ...], dtype: mx.Dtype, width_step: int = 1) -> StepClaim:
        """update_and_fetch_paged's checks and claims for one token per active request, for keys and values
        shaped `shape` [B, H_kv, 1, D] of `dtype` that the caller has not built yet; the table's width is a
        multiple of `width_step`."""
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
            rows = None
            if len(active) == shape[0]:
                index = pool.token_rows_index(pages, slots, tuple(shape), dtype, dtype)
            else:
                pool.check_token_rows(pages, slots, (len(active), *shape[1:]), dtype, dtype)
                by_slot = dict(zip((slot for slot, _ in active), positions))
                spare = _spare_position(pool, active)
                if spare is not None:
                    # Storage row b takes K/V row b: at its position where slot b is active, else at the spare
                    # position, where the empty rows' values (written in any order) are never read.
                    targets = [by_slot.get(slot, spare) for slot in range(shape[0])]
                else:
                    # Storage row b takes K/V row source[b]: its own where slot b is active, else the first
                    # active slot's, written again at that slot's position.
                    first = active[0][0]
                    source = tuple(slot if slot in by_slot else first for slot in range(shape[0]))
                    targets = [by_slot[slot] for slot in source]
                    rows = slot_rows(source)
                index = page_write.token_row_index(
                    tuple(page for page, _ in targets), tuple(slot for _, slot in targets), shape[1]
                )
            block_table, context_lens = self._table_arrays(width_step)
        except BaseException:
            self._give_back_tokens(pool, active, pool_before)
            raise
        return StepClaim(pool, (active, pool_before), index, rows, storage[0], storage[1], block_table, context_lens)

    def finish_claim(self, claim: StepClaim, keys: mx.array, values: mx.array) -> None:
        """Take the storage the step's graph wrote at the claim's index."""
        claim.pool.replace_storage(keys, values)
        self.HD = (keys.shape[1], keys.shape[3])

    def abandon_claim(self, claim: StepClaim) -> None:
        """Give back every token of the claim, and its pages, as if it had never been made."""
        active, pool_before = claim.undo
        self._give_back_tokens(claim.pool, active, pool_before)


def _spare_position(pool: TinyKvPagedPool, active: list[tuple[int, TinyKvPagedCache]]) -> tuple[int, int] | None:
    """(page id, slot) that no cache reads before writing it again, once every active request has claimed its
    token: the slot after a request's newest token in its tail page (the request writes it before its context
    reaches it), else slot 0 of a page no request holds; None when every tail page is full and every storage
    row is held."""
    for _, cache in active:
        used = cache.tail_len
        if used < pool.page_size:
            return cache.page_id_tuple[-1], used
    page = pool.unheld_page()
    return None if page is None else (page, 0)
