"""BatchingKvCache whose batch metadata comes from the scheduler step's shared table.

Only the metadata changes (the shared table, and the pool's whole storage in
place of the issued-row slices): appends, slot checks and all-or-nothing
rollback are BatchingKvCache's own. The override is of BatchingKvCache._metadata, the
one method that builds the batch's block table; tests/test_serving_variants.py
counts builds per step, so a renamed hook shows up as a failing test rather
than as silently rebuilt tables.
"""

from __future__ import annotations

import mlx.core as mx

from pagecheck.impl.kv_cache import BatchingKvCache
from pagecheck.impl.page_pool import TinyKvPagedPool
from pagecheck.impl.paged_metadata import PagedKvMetadata
from pagecheck.serving.step_page_table import StepPageTable


class StepBatchingKvCache(BatchingKvCache):
    def __init__(self, max_active_requests: int, table: StepPageTable, max_seq_len: int | None = None) -> None:
        super().__init__(max_active_requests, max_seq_len)
        self._table = table

    def _metadata(self, pool: TinyKvPagedPool, mask: mx.array | str | None) -> PagedKvMetadata:
        slots = self.slot_caches()
        rows = [() if cache is None else cache.page_id_tuple for cache in slots]
        lens = [0 if cache is None else cache.offset for cache in slots]
        storage = pool.storage
        if storage is None:
            raise ValueError("the batch's pool has no page storage after the append")
        # The whole storage, not key_pages' slice of the issued rows: the table names issued pages only,
        # and a slice would be one more graph node per tensor and layer.
        key_pages, value_pages = storage
        block_table, context_lens = self._table.arrays(rows, lens)
        return PagedKvMetadata(
            key_pages=key_pages,
            value_pages=value_pages,
            block_table=block_table,
            context_lens=context_lens,
            page_size=pool.page_size,
            mask=mask,
        )
