"""Continuous batching over paged caches: many requests' caches seen as one batch.

The batch has a fixed number of slots. A slot holds one request's cache (for
one layer) or nothing. Every active cache must draw from the same pool, so one
pair of page tensors serves the whole batch. A batched append writes row b of
the incoming chunk into slot b's cache; rows of empty slots are ignored.

The metadata pads every row of the block table with -1 to the widest row, and
an empty slot is a row of -1 with context length 0 (its attention output is
zeros). Removing a request only empties its slot: releasing its pages stays
with whoever owns the request, which holds one cache per layer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pagecheck.reference.cache import PagedKvMetadata, TinyKvPagedCache


class BatchingKvCache:
    def __init__(self, max_active_requests: int, max_seq_len: int | None = None) -> None:
        if not isinstance(max_active_requests, int) or max_active_requests <= 0:
            raise ValueError(f"max_active_requests must be a positive int, got {max_active_requests!r}")
        if max_seq_len is not None and (not isinstance(max_seq_len, int) or max_seq_len <= 0):
            raise ValueError(f"max_seq_len must be a positive int or None, got {max_seq_len!r}")
        self.max_active_requests = max_active_requests
        self.max_seq_len = max_seq_len
        self.kv_caches: list[TinyKvPagedCache | None] = [None] * max_active_requests

    @property
    def active_ids(self) -> list[int]:
        return [slot for slot, cache in enumerate(self.kv_caches) if cache is not None]

    def add_request(self, prefilled: TinyKvPagedCache, id: int) -> None:
        self._check_slot(id)
        if self.kv_caches[id] is not None:
            raise ValueError(f"slot id={id} already holds a request")
        pools = {c.pool for c in self.kv_caches if c is not None}
        if pools and prefilled.pool not in pools:
            raise ValueError(f"request for slot id={id} uses another pool than the active requests: they must share one page pool")
        self.kv_caches[id] = prefilled

    def remove_request(self, id: int) -> None:
        self._check_slot(id)
        if self.kv_caches[id] is None:
            raise ValueError(f"slot id={id} holds no request")
        self.kv_caches[id] = None

    def update_and_fetch_paged(
        self, keys: Any, values: Any, mask_length: int | None = None, mask: Any = None
    ) -> PagedKvMetadata:
        """Append row b of [B, H_kv, S, D] keys/values to slot b; return the batch's metadata."""
        if tuple(keys.shape) != tuple(values.shape) or len(keys.shape) != 4:
            raise ValueError(f"keys shape={tuple(keys.shape)} and values shape={tuple(values.shape)} must be one [B, H_kv, S, D]")
        if keys.shape[0] != self.max_active_requests:
            raise ValueError(f"keys batch={keys.shape[0]} differs from max_active_requests={self.max_active_requests}")
        active = self.active_ids
        if not active:
            raise ValueError("update_and_fetch_paged needs at least one active request")
        length = keys.shape[2]
        for slot in active:
            cache = self.kv_caches[slot]
            if self.max_seq_len is not None and cache.offset + length > self.max_seq_len:
                raise ValueError(
                    f"slot {slot}: context {cache.offset} + {length} tokens exceeds max_seq_len={self.max_seq_len}"
                )
        # One row's dtype and shape stand for all rows, so checking it first keeps a rejection atomic.
        pool = self.kv_caches[active[0]].pool
        pool._check_chunk(keys[0:1], values[0:1])
        for slot in active:
            self.kv_caches[slot].append(keys[slot : slot + 1], values[slot : slot + 1])
        return self.paged_metadata(mask)

    def paged_metadata(self, mask: Any = None) -> PagedKvMetadata:
        caches = self.kv_caches
        width = max(c.num_pages for c in caches if c is not None)
        table = np.full((self.max_active_requests, width), -1, dtype=np.int32)
        lens = np.zeros(self.max_active_requests, dtype=np.int32)
        for slot, cache in enumerate(caches):
            if cache is not None:
                table[slot, : cache.num_pages] = cache.page_ids
                lens[slot] = cache.offset
        pool = next(c.pool for c in caches if c is not None)
        return PagedKvMetadata(pool.key_pages, pool.value_pages, table, lens, pool.page_size, mask)

    def _check_slot(self, id: int) -> None:
        if not isinstance(id, int) or not 0 <= id < self.max_active_requests:
            raise ValueError(f"slot id={id!r} is not in [0, {self.max_active_requests})")
