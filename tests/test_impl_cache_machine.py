"""The built-in pool and caches under random interleavings of valid and rejected operations.

CacheMachine: three TinyKvPagedCache share one TinyKvPagedPool. Hypothesis drives appends,
rewinds, releases, checkpoint-append-rollback cycles and dense reads, and
among them operations the contract rejects: chunks of the wrong rank, batch,
heads, head dim or dtype, keys and values that differ, a wrong mask_length,
rewinds out of range or of the wrong type. A rejected operation must raise
ValueError and leave the pool and every cache exactly as they were (page
contents included); after every step the live pages are disjoint, the pool's
used pages are the caches' pages, each cache's offset is the sum of its page
lengths, and each cache holds what was appended to it, as a shadow copy says.

BatchMachine: a BatchingKvCache of three slots and a max_seq_len over one
pool. Requests join (prefilled) and leave, batched appends of one token (the
decode path) or several go to every active slot, and the batch rejects what
its contract does: a slot out of range, taken or empty, a batch of another
size, a request that would pass max_seq_len, a batch with no request. The same
rules hold after every step, and the batch's metadata names each slot's pages
(-1 past them) and context.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from pagecheck.impl.kv_cache import BatchingKvCache
from pagecheck.impl.page_pool import TinyKvPagedPool
from pagecheck.impl.paged_kv_cache import TinyKvPagedCache
from pagecheck.reference.arrays import to_numpy
from tests.kv_chunks import cache_state, pool_state, random_chunk

HEADS, HEAD_DIM, CACHES = 2, 4, 3
BAD_CHUNKS = ("empty", "rank 3", "batch 2", "heads", "head dim", "dtype", "values longer", "values' dtype",
              "mask_length", "mask_length float", "not an array")  # fmt: skip
BAD_REWINDS = ("negative", "past the offset", "float", "None", "bool")


def bad_chunk(kind: str, rng: np.random.Generator, length: int) -> tuple[Any, Any, Any]:
    """(key, value, mask_length) of an append the contract rejects, once the pool's storage exists."""
    key, value = random_chunk(rng, length, num_heads=HEADS, head_dim=HEAD_DIM)
    mask_length: Any = None
    if kind == "empty":
        key, value = random_chunk(rng, 0, num_heads=HEADS, head_dim=HEAD_DIM)
    elif kind == "rank 3":
        key, value = key[0], value[0]
    elif kind == "batch 2":
        key, value = random_chunk(rng, length, num_heads=HEADS, head_dim=HEAD_DIM, batch=2)
    elif kind == "heads":
        key, value = random_chunk(rng, length, num_heads=HEADS + 1, head_dim=HEAD_DIM)
    elif kind == "head dim":
        key, value = random_chunk(rng, length, num_heads=HEADS, head_dim=HEAD_DIM + 1)
    elif kind == "dtype":
        key, value = key.astype(mx.float16), value.astype(mx.float16)
    elif kind == "values longer":
        value = random_chunk(rng, length + 1, num_heads=HEADS, head_dim=HEAD_DIM)[1]
    elif kind == "values' dtype":
        value = value.astype(mx.float16)
    elif kind == "mask_length":
        mask_length = length + 1
    elif kind == "mask_length float":
        mask_length = float(length)
    elif kind == "not an array":
        key = to_numpy(key).tolist()
    return key, value, mask_length


def assert_rejected(snapshot: Any, action: Any) -> None:
    """`action` raises ValueError and leaves `snapshot()` as it was."""
    before = snapshot()
    try:
        action()
    except ValueError:
        assert snapshot() == before, "a rejected operation changed the pool or a cache"
        return
    raise AssertionError("the operation was accepted")


def bad_rewind(kind: str, offset: int) -> Any:
    return {"negative": -1, "past the offset": offset + 1, "float": 0.5, "None": None, "bool": True}[kind]


class CacheMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.rng = np.random.default_rng(0)
        self.pool = TinyKvPagedPool(page_size=1)
        self.caches: list[TinyKvPagedCache] = []
        self.shadow: list[list[tuple[np.ndarray, np.ndarray]]] = []  # per cache: its tokens' K and V [H, D]

    @initialize(page_size=st.integers(1, 4), seed=st.integers(0, 2**16))
    def start(self, page_size: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.pool = TinyKvPagedPool(page_size=page_size)
        self.caches = [TinyKvPagedCache(self.pool) for _ in range(CACHES)]
        self.shadow = [[] for _ in range(CACHES)]

    def snapshot(self) -> tuple[Any, ...]:
        return pool_state(self.pool), tuple(cache_state(cache) for cache in self.caches)

    def rejected(self, action: Any) -> None:
        assert_rejected(self.snapshot, action)

    @rule(which=st.integers(0, CACHES - 1), length=st.integers(1, 6), with_mask_length=st.booleans())
    def append(self, which: int, length: int, with_mask_length: bool) -> None:
        key, value = random_chunk(self.rng, length, num_heads=HEADS, head_dim=HEAD_DIM)
        self.caches[which].append(key, value, length if with_mask_length else None)
        keys, values = to_numpy(key)[0], to_numpy(value)[0]
        self.shadow[which] += [(keys[:, t], values[:, t]) for t in range(length)]

    @rule(which=st.integers(0, CACHES - 1), kind=st.sampled_from(BAD_CHUNKS), length=st.integers(1, 4))
    def append_rejected(self, which: int, kind: str, length: int) -> None:
        if self.pool.storage is None and kind in ("heads", "head dim", "dtype"):
            return  # the first write sets the pool's geometry and dtype: these are valid then
        key, value, mask_length = bad_chunk(kind, self.rng, length)
        self.rejected(lambda: self.caches[which].append(key, value, mask_length))

    @rule(which=st.integers(0, CACHES - 1), data=st.data())
    def rewind(self, which: int, data: st.DataObject) -> None:
        cache = self.caches[which]
        n = data.draw(st.integers(0, cache.offset))
        cache.rewind(n)
        del self.shadow[which][len(self.shadow[which]) - n :]

    @rule(which=st.integers(0, CACHES - 1), kind=st.sampled_from(BAD_REWINDS))
    def rewind_rejected(self, which: int, kind: str) -> None:
        cache = self.caches[which]
        if kind == "bool" and cache.offset == 0:
            return  # True is rejected as not an int; at offset 0 any rewind past 0 is too, so nothing new
        self.rejected(lambda: cache.rewind(bad_rewind(kind, cache.offset)))

    @rule(which=st.integers(0, CACHES - 1))
    def release(self, which: int) -> None:
        self.caches[which].release()
        self.shadow[which] = []

    @rule(which=st.integers(0, CACHES - 1), length=st.integers(1, 6))
    def append_then_roll_back(self, which: int, length: int) -> None:
        before = self.snapshot()
        cache, pool = self.caches[which], self.pool
        cache_point, pool_point = cache.checkpoint(), pool.checkpoint()
        cache.append(*random_chunk(self.rng, length, num_heads=HEADS, head_dim=HEAD_DIM))
        cache.rollback(cache_point)
        pool.rollback(pool_point)
        assert self.snapshot() == before

    @invariant()
    def pages_are_owned_once(self) -> None:
        live = [page for cache in self.caches for page in cache.page_ids]
        assert len(live) == len(set(live)), f"a page is held twice: {live}"
        assert sorted(live) == sorted(self.pool.used_page_ids)
        for cache in self.caches:
            assert cache.offset == sum(cache.page_lens) == len(self.shadow[self.caches.index(cache)])

    @invariant()
    def caches_hold_what_was_appended(self) -> None:
        for cache, tokens in zip(self.caches, self.shadow):
            assert holds(cache, tokens)


def holds(cache: TinyKvPagedCache, tokens: list[tuple[np.ndarray, np.ndarray]]) -> bool:
    """Whether the cache's K/V, read back dense, are the shadow's tokens."""
    if not tokens:
        return cache.offset == 0
    keys, values = cache.gather_dense()
    return np.array_equal(to_numpy(keys)[0], np.stack([k for k, _ in tokens], axis=1)) and np.array_equal(
        to_numpy(values)[0], np.stack([v for _, v in tokens], axis=1)
    )


SLOTS, MAX_SEQ_LEN = 3, 12


class BatchMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.rng = np.random.default_rng(0)
        self.pool = TinyKvPagedPool(page_size=1)
        self.batch = BatchingKvCache(SLOTS, MAX_SEQ_LEN)
        self.shadow: list[list[tuple[np.ndarray, np.ndarray]] | None] = [None] * SLOTS

    @initialize(page_size=st.integers(1, 4), seed=st.integers(0, 2**16))
    def start(self, page_size: int, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.pool = TinyKvPagedPool(page_size=page_size)
        self.batch = BatchingKvCache(SLOTS, MAX_SEQ_LEN)
        self.shadow = [None] * SLOTS

    def snapshot(self) -> tuple[Any, ...]:
        caches = tuple(None if cache is None else cache_state(cache) for cache in self.batch.slot_caches())
        return pool_state(self.pool), caches

    def rejected(self, action: Any) -> None:
        assert_rejected(self.snapshot, action)

    @rule(slot=st.integers(-1, SLOTS), prefill=st.integers(0, 5))
    def add_request(self, slot: int, prefill: int) -> None:
        cache = TinyKvPagedCache(self.pool)
        tokens: list[tuple[np.ndarray, np.ndarray]] = []
        if prefill:
            key, value = random_chunk(self.rng, prefill, num_heads=HEADS, head_dim=HEAD_DIM)
            cache.append(key, value)
            keys, values = to_numpy(key)[0], to_numpy(value)[0]
            tokens = [(keys[:, t], values[:, t]) for t in range(prefill)]
        if 0 <= slot < SLOTS and self.shadow[slot] is None:
            self.batch.add_request(cache, slot)
            self.shadow[slot] = tokens
        else:
            self.rejected(lambda: self.batch.add_request(cache, slot))
            cache.release()

    @rule(slot=st.integers(-1, SLOTS))
    def remove_request(self, slot: int) -> None:
        if 0 <= slot < SLOTS and self.shadow[slot] is not None:
            self.batch.remove_request(slot)
            self.shadow[slot] = None
        else:
            self.rejected(lambda: self.batch.remove_request(slot))

    @rule(length=st.sampled_from((1, 1, 2, 3)), rows=st.sampled_from((SLOTS, SLOTS, SLOTS - 1)))
    def append_batch(self, length: int, rows: int) -> None:
        keys = mx.array(self.rng.standard_normal((rows, HEADS, length, HEAD_DIM)).astype(np.float32))
        values = mx.array(self.rng.standard_normal((rows, HEADS, length, HEAD_DIM)).astype(np.float32))
        active = [slot for slot in range(SLOTS) if self.shadow[slot] is not None]
        fits = all(len(self.shadow[slot]) + length <= MAX_SEQ_LEN for slot in active)
        if rows != SLOTS or not active or not fits:
            self.rejected(lambda: self.batch.update_and_fetch_paged(keys, values))
            return
        metadata = self.batch.update_and_fetch_paged(keys, values)
        for slot in active:
            k, v = to_numpy(keys)[slot], to_numpy(values)[slot]
            self.shadow[slot] += [(k[:, t], v[:, t]) for t in range(length)]
        lens, table = to_numpy(metadata.context_lens), to_numpy(metadata.block_table)
        for slot, cache in enumerate(self.batch.slot_caches()):
            pages = [] if cache is None else cache.page_ids
            assert lens[slot] == (0 if cache is None else cache.offset)
            assert list(table[slot]) == pages + [-1] * (table.shape[1] - len(pages))

    @invariant()
    def pages_are_owned_once_and_hold_the_tokens(self) -> None:
        caches = [cache for cache in self.batch.slot_caches() if cache is not None]
        live = [page for cache in caches for page in cache.page_ids]
        assert len(live) == len(set(live)) and sorted(live) == sorted(self.pool.used_page_ids)
        assert self.batch.active_request_ids == [slot for slot in range(SLOTS) if self.shadow[slot] is not None]
        for slot, cache in enumerate(self.batch.slot_caches()):
            if cache is not None:
                assert cache.offset == sum(cache.page_lens) and holds(cache, self.shadow[slot])


CacheMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_pool_and_caches_under_valid_and_rejected_operations = CacheMachine.TestCase
BatchMachine.TestCase.settings = CacheMachine.TestCase.settings
test_batch_under_joins_leaves_and_rejected_appends = BatchMachine.TestCase
