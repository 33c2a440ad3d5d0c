"""The KV storage of a serving run: per-layer caches of every admitted request and the decode batches.

One object per run owns the lifecycle of every request's caches, keyed by
request id: `open_request` creates one cache per layer, `admit_to_decode`
places them in slot `slot` of every layer's decode batch, and `close_request`
returns them (pages to the pools, or dense buffers) exactly once, whether the
request sits in a decode batch or is still prefilling. `close_all` does that
for whatever is left, so a scheduler can call it from a `finally`.

PagedServingKv: one TinyKvPagedPool per layer, shared by all requests, pages
allocated on demand. DenseServingKv: one buffer per request and layer,
reserved for the request's whole context up front.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pagecheck.serving.dense_kv_batch import DenseKvBatch
from pagecheck.serving.dense_kv_cache import DenseKvCache
from pagecheck.impl.page_pool import TinyKvPagedPool, is_int
from pagecheck.serving.step_batching_cache import StepBatchingKvCache
from pagecheck.serving.step_page_table import StepPageTable
from pagecheck.serving.step_paged_cache import StepPagedKvCache

DEFAULT_PAGE_SIZE = 16


@dataclass(frozen=True)
class KvUsage:
    """One moment of a run's KV storage."""

    storage_bytes: int  # K/V storage allocated now, all layers
    live_pages: int | None  # pages held by requests, all layers (None: storage without pages)
    held_slots: int  # token slots the open requests hold, per layer
    held_tokens: int  # tokens those slots contain, per layer
    growth_copy_bytes: int  # bytes copied by storage growth so far
    reused_pages: int | None  # allocations served from freed pages so far (None: no pages)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class _ServingKvBase:
    def __init__(self, num_layers: int, max_batch: int, kv_bytes_per_token_layer: int) -> None:
        for name, value in (
            ("num_layers", num_layers), ("max_batch", max_batch), ("kv_bytes_per_token_layer", kv_bytes_per_token_layer)
        ):
            if not is_int(value) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.num_layers = num_layers
        self.max_batch = max_batch
        self.kv_bytes_per_token_layer = kv_bytes_per_token_layer
        self._open: dict[int, list[Any]] = {}
        self._slots: dict[int, int] = {}
        self.decode_caches: list[Any] = []
        # The shared per-step block table (paged storage only); the scheduler starts it each step.
        self.table: StepPageTable | None = None

    @property
    def open_request_ids(self) -> list[int]:
        return list(self._open)

    def caches(self, request_id: int) -> list[Any]:
        if request_id not in self._open:
            raise ValueError(f"request_id={request_id} has no open caches")
        return self._open[request_id]

    def open_request(self, request_id: int, max_context: int) -> list[Any]:
        if request_id in self._open:
            raise ValueError(f"request_id={request_id} already has open caches")
        if not is_int(max_context) or max_context <= 0:
            raise ValueError(f"max_context must be a positive int, got {max_context!r}")
        caches = [self._new_cache(layer_idx, max_context) for layer_idx in range(self.num_layers)]
        self._open[request_id] = caches
        return caches

    def admit_to_decode(self, request_id: int, slot: int) -> None:
        caches = self.caches(request_id)
        if request_id in self._slots:
            raise ValueError(f"request_id={request_id} is already in decode slot {self._slots[request_id]}")
        for batch, cache in zip(self.decode_caches, caches):
            batch.add_request(cache, slot)
        self._slots[request_id] = slot

    def close_request(self, request_id: int) -> None:
        """Give back every layer's storage of this request, once."""
        caches = self.caches(request_id)
        slot = self._slots.pop(request_id, None)
        del self._open[request_id]
        if slot is None:
            for cache in caches:
                cache.release()
        else:
            for batch in self.decode_caches:
                batch.remove_request(slot)

    def close_all(self) -> None:
        for request_id in list(self._open):
            self.close_request(request_id)

    def _new_cache(self, layer_idx: int, max_context: int) -> Any:
        raise NotImplementedError


class PagedServingKv(_ServingKvBase):
    def __init__(
        self,
        num_layers: int,
        max_batch: int,
        kv_bytes_per_token_layer: int,
        page_size: int = DEFAULT_PAGE_SIZE,
        gathers: bool = False,
    ) -> None:
        super().__init__(num_layers, max_batch, kv_bytes_per_token_layer)
        self.page_size = page_size
        self.gathers = gathers
        self.table = StepPageTable()
        self.pools = [TinyKvPagedPool(page_size) for _ in range(num_layers)]
        self.decode_caches = [StepBatchingKvCache(max_batch, self.table) for _ in range(num_layers)]

    def _new_cache(self, layer_idx: int, max_context: int) -> StepPagedKvCache:
        return StepPagedKvCache(self.pools[layer_idx], self.table)

    def projected_bytes(self, max_contexts: list[int]) -> int:
        """Worst-case KV bytes of requests with these max contexts served together: their pages in
        every layer, plus (gathering) one layer's gathered K/V, a row per request as wide as the widest."""
        if not max_contexts:
            return 0
        slots = [ceil_div(context, self.page_size) * self.page_size for context in max_contexts]
        gathered = len(slots) * max(slots) if self.gathers else 0
        return (sum(slots) * self.num_layers + gathered) * self.kv_bytes_per_token_layer

    def usage(self) -> KvUsage:
        first_layer = [caches[0] for caches in self._open.values()]
        return KvUsage(
            storage_bytes=sum(pool.storage_nbytes for pool in self.pools),
            live_pages=sum(pool.num_pages - pool.num_free_pages for pool in self.pools),
            held_slots=sum(cache.num_pages for cache in first_layer) * self.page_size,
            held_tokens=sum(cache.offset for cache in first_layer),
            growth_copy_bytes=sum(pool.copied_bytes_on_growth for pool in self.pools),
            reused_pages=sum(pool.reused_page_allocations for pool in self.pools),
        )


class DenseServingKv(_ServingKvBase):
    def __init__(self, num_layers: int, max_batch: int, kv_bytes_per_token_layer: int) -> None:
        super().__init__(num_layers, max_batch, kv_bytes_per_token_layer)
        self.decode_caches = [DenseKvBatch(max_batch) for _ in range(num_layers)]

    def _new_cache(self, layer_idx: int, max_context: int) -> DenseKvCache:
        return DenseKvCache(max_context)

    def projected_bytes(self, max_contexts: list[int]) -> int:
        """Worst-case KV bytes of requests with these max contexts served together: their reserved
        buffers in every layer, plus one layer's repacked K/V, a row per request as wide as the widest."""
        if not max_contexts:
            return 0
        repacked = len(max_contexts) * max(max_contexts)
        return (sum(max_contexts) * self.num_layers + repacked) * self.kv_bytes_per_token_layer

    def usage(self) -> KvUsage:
        first_layer = [caches[0] for caches in self._open.values()]
        return KvUsage(
            storage_bytes=sum(cache.nbytes for caches in self._open.values() for cache in caches),
            live_pages=None,
            held_slots=sum(cache.capacity for cache in first_layer if cache.nbytes),
            held_tokens=sum(cache.offset for cache in first_layer),
            growth_copy_bytes=0,
            reused_pages=None,
        )


ServingKv = PagedServingKv | DenseServingKv


def serving_kv_for(
    attention_path: str, num_layers: int, max_batch: int, kv_bytes_per_token_layer: int, page_size: int
) -> ServingKv:
    if attention_path == "dense":
        return DenseServingKv(num_layers, max_batch, kv_bytes_per_token_layer)
    return PagedServingKv(
        num_layers, max_batch, kv_bytes_per_token_layer, page_size, gathers=attention_path == "paged_gather"
    )
