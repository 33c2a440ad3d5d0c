"""Mutant: BatchingKvCache reports each live row's context as its length before the append plus one, as for decode."""

from typing import Any

import numpy as np

from pagecheck.reference.batching_cache import BatchingKvCache as _ReferenceBatchingKvCache
from pagecheck.reference.cache import PagedKvMetadata
from pagecheck.reference.subject import TinyKvPagedCache, TinyKvPagedPool, paged_attention  # noqa: F401

KILLED_BY = "batching_cache"


class BatchingKvCache(_ReferenceBatchingKvCache):
    def update_and_fetch_paged(
        self, keys: Any, values: Any, mask_length: int | None = None, mask: Any = None
    ) -> PagedKvMetadata:
        before = {slot: self.kv_caches[slot].offset for slot in self.active_ids}
        metadata = super().update_and_fetch_paged(keys, values, mask_length, mask)
        lens = np.zeros(self.max_active_requests, dtype=np.int32)
        for slot, offset in before.items():
            lens[slot] = offset + 1
        return PagedKvMetadata(
            metadata.key_pages, metadata.value_pages, metadata.block_table, lens, metadata.page_size, metadata.mask
        )
