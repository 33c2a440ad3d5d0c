"""Decode slots over dense per-request caches; the batch K/V is rebuilt from them on every step.

The rebuilt K/V holds one row per occupied slot (listed in `rows`), each
zero-padded to the longest context among them; empty slots cost nothing.
Every rebuild copies the whole [R, H_kv, S, D] tensor (the model counts it as
repack traffic).
"""

from __future__ import annotations

import mlx.core as mx

from pagecheck.serving.dense_kv_cache import DenseKv, DenseKvCache
from pagecheck.impl.page_pool import check_kv_pair, is_int


class DenseKvBatch:
    def __init__(self, max_active_requests: int) -> None:
        if not is_int(max_active_requests) or max_active_requests <= 0:
            raise ValueError(f"max_active_requests must be a positive int, got {max_active_requests!r}")
        self.max_active_requests = max_active_requests
        self._requests: list[DenseKvCache | None] = [None] * max_active_requests

    @property
    def active_request_ids(self) -> list[int]:
        return [slot for slot, cache in enumerate(self._requests) if cache is not None]

    def request(self, id: int) -> DenseKvCache:
        self._check_slot(id)
        cache = self._requests[id]
        if cache is None:
            raise ValueError(f"id={id} is an empty slot")
        return cache

    def add_request(self, prefilled: DenseKvCache, id: int) -> None:
        self._check_slot(id)
        if self._requests[id] is not None:
            raise ValueError(f"id={id} already holds a request; remove it first")
        self._requests[id] = prefilled

    def remove_request(self, id: int) -> None:
        """Empty slot `id` and drop the request's buffers."""
        self.request(id).release()
        self._requests[id] = None

    def update_and_fetch_dense(self, keys: mx.array, values: mx.array) -> DenseKv:
        """Append row b of keys/values [B, H_kv, L, D] to slot b, then the rebuilt batch K/V."""
        check_kv_pair(keys, values, ("keys", "values"))
        if keys.ndim != 4 or keys.shape[0] != self.max_active_requests:
            raise ValueError(
                f"keys shape={tuple(keys.shape)} must be [B, H_kv, L, D] with B = max_active_requests="
                f"{self.max_active_requests}"
            )
        active = self.active_request_ids
        if not active:
            raise ValueError("the batch has no active requests; add_request first")
        length = keys.shape[2]
        for slot in active:
            cache = self.request(slot)
            if cache.offset + length > cache.capacity:
                raise ValueError(
                    f"slot {slot} would hold {cache.offset + length} tokens, over its capacity={cache.capacity}"
                )
        for slot in active:
            self.request(slot).append(keys[slot : slot + 1], values[slot : slot + 1])
        caches = [self.request(slot) for slot in active]
        width = max(cache.offset for cache in caches)
        rows = [cache.prefix(width) for cache in caches]
        return DenseKv(
            keys=mx.concatenate([row_keys for row_keys, _ in rows]),
            values=mx.concatenate([row_values for _, row_values in rows]),
            context_lens=mx.array([cache.offset for cache in caches], dtype=mx.int32),
            rows=mx.array(active, dtype=mx.int32),
        )

    def _check_slot(self, id: int) -> None:
        if not is_int(id) or not 0 <= id < self.max_active_requests:
            raise ValueError(f"id={id!r} must be a slot in [0, {self.max_active_requests})")
