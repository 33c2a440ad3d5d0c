"""A request's paged cache for one layer whose metadata comes from the scheduler step's shared table.

Its appends (prefill chunks) write the whole chunk in one storage update per
tensor (TinyKvPagedPool.write_token_rows) instead of one per page; positions,
pages and the all-or-nothing rule are TinyKvPagedCache's. A prefill chunk
compiled as one call (serving/paged_step.py) appends in two halves instead
(serving/step_claim.py): `claim_tokens`, then `finish_claim` or
`abandon_claim`.
"""

from __future__ import annotations

import mlx.core as mx

from pagecheck.impl.page_pool import TinyKvPagedPool
from pagecheck.impl.paged_kv_cache import TinyKvPagedCache
from pagecheck.impl.paged_metadata import PagedKvMetadata
from pagecheck.serving.step_claim import StepClaim
from pagecheck.serving.step_page_table import StepPageTable


class StepPagedKvCache(TinyKvPagedCache):
    def __init__(self, pool: TinyKvPagedPool, table: StepPageTable) -> None:
        super().__init__(pool)
        self._table = table

    def _make_page_tuple(self) -> tuple[int, ...]:
        # Every layer's cache of a request holds the same page ids; one shared tuple lets the step's table
        # compare rows by identity instead of id by id.
        return self._table.shared_row(tuple(self._page_ids))

    def _write_chunk(self, key: mx.array, value: mx.array) -> None:
        # Inside TinyKvPagedCache.append's checks and all-or-nothing rollback: one update per tensor.
        page_ids, slots = self.claim_token_slots(key.shape[2])
        # The chunk [1, H_kv, L, D] as it comes: one row of L tokens.
        self._pool.write_token_rows(page_ids, slots, key, value)

    def paged_metadata(
        self, max_pages: int | None = None, mask: mx.array | str | None = None
    ) -> PagedKvMetadata:
        if max_pages is not None:
            return super().paged_metadata(max_pages, mask)
        key_pages, value_pages = self.pool.key_pages, self.pool.value_pages
        if key_pages is None or value_pages is None:
            raise ValueError("paged_metadata: the pool has no page storage yet (nothing was written to it)")
        block_table, context_lens = self._table.arrays([self.page_id_tuple], [self.offset])
        return PagedKvMetadata(
            key_pages=key_pages,
            value_pages=value_pages,
            block_table=block_table,
            context_lens=context_lens,
            page_size=self.pool.page_size,
            mask=mask,
        )

    def claim_tokens(self, shape: tuple[int, ...], dtype: mx.Dtype, width_step: int = 1) -> StepClaim:
        """append's checks and claims for a chunk of keys and values shaped `shape` [1, H_kv, L, D] of `dtype`
        that the caller has not built yet; the table's width is a multiple of `width_step`."""
        self._pool.check_chunk_shape(tuple(shape), dtype, dtype)
        pool_before, cache_before = self._pool.checkpoint(), self.checkpoint()
        try:
            if self._pool.storage is None:
                raise ValueError("the pool has no page storage yet; the request's first chunk writes it")
            page_ids, slots = self.claim_token_slots(shape[2])
            index = self._pool.token_rows_index(page_ids, slots, tuple(shape), dtype, dtype)
            keys, values = self._pool.storage  # after the claims: a new page may have grown it
            block_table, context_lens = self._table.arrays([self.page_id_tuple], [self.offset], width_step)
        except BaseException:
            self._restore(pool_before, cache_before)
            raise
        return StepClaim(self._pool, (pool_before, cache_before), index, None, keys, values, block_table, context_lens)

    def finish_claim(self, claim: StepClaim, keys: mx.array, values: mx.array) -> None:
        """Take the storage the step's graph wrote at the claim's index."""
        claim.pool.replace_storage(keys, values)

    def abandon_claim(self, claim: StepClaim) -> None:
        """Put the pool and this cache back as they were before the claim."""
        self._restore(*claim.undo)
