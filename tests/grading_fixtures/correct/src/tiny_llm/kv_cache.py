"""Continuous batching over paged caches: a fixed number of slots, each one request's cache or empty.

Every active cache draws from one pool. The metadata pads each row of the
block table with -1 to the widest row; an empty slot is all -1 with context 0.
"""

import mlx.core as mx

from .paged_kv_cache import PagedKvMetadata


class BatchingKvCache:
    def __init__(self, max_active_requests: int, max_seq_len=None) -> None:
        if isinstance(max_active_requests, bool) or not isinstance(max_active_requests, int) or max_active_requests <= 0:
            raise ValueError(f"max_active_requests must be a positive int, got {max_active_requests!r}")
        if max_seq_len is not None and (not isinstance(max_seq_len, int) or max_seq_len <= 0):
            raise ValueError(f"max_seq_len must be a positive int or None, got {max_seq_len!r}")
        self.max_active_requests = max_active_requests
        self.max_seq_len = max_seq_len
        self.kv_caches = [None] * max_active_requests

    def _check_slot(self, id) -> None:
        if isinstance(id, bool) or not isinstance(id, int) or not 0 <= id < self.max_active_requests:
            raise ValueError(f"slot id={id!r} is not in [0, {self.max_active_requests})")

    def add_request(self, prefilled, id: int) -> None:
        self._check_slot(id)
        if self.kv_caches[id] is not None:
            raise ValueError(f"slot id={id} already holds a request")
        pools = [cache.pool for cache in self.kv_caches if cache is not None]
        if pools and all(prefilled.pool is not pool for pool in pools):
            raise ValueError(f"the request for slot id={id} uses another pool than the active requests")
        self.kv_caches[id] = prefilled

    def remove_request(self, id: int) -> None:
        self._check_slot(id)
        if self.kv_caches[id] is None:
            raise ValueError(f"slot id={id} holds no request")
        self.kv_caches[id] = None

    def update_and_fetch_paged(self, keys, values, mask_length=None, mask=None) -> PagedKvMetadata:
        if len(keys.shape) != 4 or tuple(keys.shape) != tuple(values.shape):
            raise ValueError(f"keys shape={tuple(keys.shape)} and values shape={tuple(values.shape)} "
                             "must be one [B, H_kv, S, D]")
        if keys.shape[0] != self.max_active_requests:
            raise ValueError(f"keys batch={keys.shape[0]} differs from max_active_requests={self.max_active_requests}")
        active = [slot for slot, cache in enumerate(self.kv_caches) if cache is not None]
        if not active:
            raise ValueError("update_and_fetch_paged needs at least one active request")
        length = keys.shape[2]
        for slot in active:
            context = self.kv_caches[slot].offset
            if self.max_seq_len is not None and context + length > self.max_seq_len:
                raise ValueError(f"slot {slot}: context {context} + {length} tokens exceeds max_seq_len={self.max_seq_len}")
        self.kv_caches[active[0]].pool.check_chunk(keys[0:1], values[0:1])
        for slot in active:
            self.kv_caches[slot].append(keys[slot : slot + 1], values[slot : slot + 1])
        return self.paged_metadata(mask)

    def paged_metadata(self, mask=None) -> PagedKvMetadata:
        live = [(slot, cache) for slot, cache in enumerate(self.kv_caches) if cache is not None]
        width = max(cache.num_pages for _, cache in live)
        rows = [[-1] * width for _ in range(self.max_active_requests)]
        lens = [0] * self.max_active_requests
        for slot, cache in live:
            rows[slot][: cache.num_pages] = cache.page_ids
            lens[slot] = cache.offset
        pool = live[0][1].pool
        return PagedKvMetadata(pool.key_pages, pool.value_pages, mx.array(rows, dtype=mx.int32),
                               mx.array(lens, dtype=mx.int32), pool.page_size, mask)
