"""A one-token batch step writes every request's token in one storage update, exactly as per-request appends would."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from pagecheck.impl import page_write
from pagecheck.impl.kv_cache import BatchingKvCache
from pagecheck.impl.page_pool import TinyKvPagedPool
from pagecheck.impl.paged_kv_cache import TinyKvPagedCache
from pagecheck.bench.graph import graph_primitives
from tests.kv_chunks import cache_state, fail_on_call, pool_state, random_chunk

PAGE_SIZE = 4
PREFILLS = (3, 4, 7)  # a tail with room, a full tail (the token opens a page), a tail with room


def _batch(rng: np.random.Generator, slots: int, occupied: tuple[int, ...]) -> tuple[BatchingKvCache, TinyKvPagedPool]:
    pool = TinyKvPagedPool(page_size=PAGE_SIZE)
    batch = BatchingKvCache(max_active_requests=slots)
    for slot, length in zip(occupied, PREFILLS):
        cache = TinyKvPagedCache(pool)
        cache.update_and_fetch_paged(*random_chunk(rng, length))
        batch.add_request(cache, slot)
    return batch, pool


@pytest.mark.parametrize("occupied", [(0, 1, 2), (0, 2, 3)], ids=["every slot", "an empty slot"])
def test_one_token_step_matches_per_request_appends(occupied: tuple[int, ...]) -> None:
    slots = max(occupied) + 1
    batched, batched_pool = _batch(np.random.default_rng(3), slots, occupied)
    single, single_pool = _batch(np.random.default_rng(3), slots, occupied)
    for step in range(PAGE_SIZE + 1):  # crosses a page boundary in every request
        keys, values = random_chunk(np.random.default_rng(100 + step), 1, batch=slots)
        metadata = batched.update_and_fetch_paged(keys, values)
        for slot in occupied:
            single.request(slot).append(keys[slot : slot + 1], values[slot : slot + 1])
        assert metadata.context_lens.tolist() == [single.request(s).offset if s in occupied else 0 for s in range(slots)]
    assert pool_state(batched_pool) == pool_state(single_pool)
    for slot in occupied:
        assert cache_state(batched.request(slot)) == cache_state(single.request(slot))


def test_one_token_step_is_one_storage_update_per_tensor(monkeypatch: pytest.MonkeyPatch) -> None:
    batch, _ = _batch(np.random.default_rng(0), 3, (0, 1, 2))
    writes = []
    original = page_write.write_token_rows
    monkeypatch.setattr(page_write, "write_token_rows", lambda *args: writes.append(1) or original(*args))
    batch.update_and_fetch_paged(*random_chunk(np.random.default_rng(1), 1, batch=3))
    assert len(writes) == 2  # keys and values, for all three requests


def test_a_failed_write_leaves_every_request_and_the_pool_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    batch, pool = _batch(np.random.default_rng(0), 3, (0, 1, 2))
    before = (pool_state(pool), [cache_state(batch.request(slot)) for slot in range(3)])
    fail_on_call(page_write, "write_token_rows", 2, monkeypatch)  # the values' write, after the keys'
    with pytest.raises(RuntimeError):
        batch.update_and_fetch_paged(*random_chunk(np.random.default_rng(1), 1, batch=3))
    assert (pool_state(pool), [cache_state(batch.request(slot)) for slot in range(3)]) == before


@pytest.mark.parametrize(
    ("page_ids", "slots", "rows", "message"),
    [
        ([0, 1], [0], 2, "len\\(slots\\)=1"),
        ([0, 0], [1, 1], 2, "name one position twice"),
        ([0], [PAGE_SIZE], 1, f"outside a page of size {PAGE_SIZE}"),
        ([9], [0], 1, "never issued"),
        ([-1], [0], 1, "never issued"),
        ([True], [0], 1, "never issued"),
        ([2], [0], 1, "is free"),
        ([0, 1], [0, -1], 2, "start=-1 is outside"),
        ([0], [1.0], 1, "start=1.0 is outside"),
    ],
)
def test_pool_token_writes_reject_bad_positions(page_ids: list[int], slots: list[int], rows: int,
                                                 message: str) -> None:
    pool = TinyKvPagedPool(page_size=PAGE_SIZE)
    for _ in range(3):
        pool.allocate_page()
    pool.free_page(2)
    keys = mx.zeros((rows, 2, 1, 4))
    before = pool_state(pool)
    with pytest.raises(ValueError, match=message):
        pool.write_token_rows(page_ids, slots, keys, keys)
    assert pool_state(pool) == before


def test_token_row_index_names_each_token_and_head() -> None:
    pages, heads, slots = (part.tolist() for part in page_write.token_row_index((2, 0), (1, 3), 2))
    assert pages == [[[2], [2]], [[0], [0]]] and heads == [[[0], [1]], [[0], [1]]]
    assert slots == [[[1], [1]], [[3], [3]]]


def test_a_token_row_write_is_one_scatter_and_leaves_its_input_alone() -> None:
    storage = mx.zeros((3, 2, PAGE_SIZE, 4), dtype=mx.float32)
    rows = mx.arange(2 * 2 * 4, dtype=mx.float32).reshape(2, 2, 1, 4) + 1
    written = page_write.write_token_rows(storage, page_write.token_row_index((2, 0), (1, 3), 2), rows)
    expected = np.zeros((3, 2, PAGE_SIZE, 4), dtype=np.float32)
    expected[2, :, 1] = np.array(rows[0, :, 0])
    expected[0, :, 3] = np.array(rows[1, :, 0])
    assert np.array_equal(np.array(written), expected)
    assert not np.array(storage).any()


def test_a_token_row_write_adds_two_graph_nodes() -> None:
    storage = mx.zeros((3, 2, PAGE_SIZE, 4), dtype=mx.float32)
    mx.eval(storage)
    rows = mx.ones((2, 2, 1, 4), dtype=mx.float32)
    mx.eval(rows)  # computed, like the index: the graph counted is the write's alone
    written = page_write.write_token_rows(storage, page_write.token_row_index((2, 0), (1, 3), 2), rows)
    assert graph_primitives(written) == {"Reshape": 1, "Scatter": 1}


def test_a_full_decode_step_writes_each_pool_in_two_graph_nodes() -> None:
    # Every slot occupied: the step's keys [B, H_kv, 1, D] go into the scatter as they come, so each pool's
    # graph is the scatter and MLX's reshape of its update, with no reshape of the keys before it.
    batch, pool = _batch(np.random.default_rng(5), 3, (0, 1, 2))
    batch.update_and_fetch_paged(*random_chunk(np.random.default_rng(6), 1, batch=3))  # grows the storage
    mx.eval(*pool.storage)
    growths = pool.storage_growths
    keys, values = random_chunk(np.random.default_rng(7), 1, batch=3)
    mx.eval(keys, values)
    batch.update_and_fetch_paged(keys, values)
    assert pool.storage_growths == growths
    new_keys, new_values = pool.storage
    assert graph_primitives(new_keys) == {"Reshape": 1, "Scatter": 1}
    assert graph_primitives(new_values) == {"Reshape": 1, "Scatter": 1}


def test_a_serving_chunk_append_matches_the_page_by_page_append(monkeypatch: pytest.MonkeyPatch) -> None:
    from pagecheck.serving.step_page_table import StepPageTable
    from pagecheck.serving.step_paged_cache import StepPagedKvCache

    step_pool, page_pool = TinyKvPagedPool(page_size=PAGE_SIZE), TinyKvPagedPool(page_size=PAGE_SIZE)
    step_cache, page_cache = StepPagedKvCache(step_pool, StepPageTable()), TinyKvPagedCache(page_pool)
    writes = []
    original = page_write.write_token_rows
    monkeypatch.setattr(page_write, "write_token_rows", lambda *args: writes.append(1) or original(*args))
    for seed, length in enumerate((3, 10, 1, 4)):  # fills the tail, spans pages, opens one exactly
        chunk = random_chunk(np.random.default_rng(seed), length)
        step_cache.append(*chunk)
        page_cache.append(*chunk)
    assert pool_state(step_pool) == pool_state(page_pool)
    assert cache_state(step_cache) == cache_state(page_cache)
    assert len(writes) == 2 * 4  # one per tensor and chunk


def test_a_serving_chunk_append_writes_each_pool_in_two_graph_nodes() -> None:
    # The chunk [1, H_kv, L, D] goes into the scatter as it comes: no transpose (whose reshape for the
    # scatter would copy the chunk), only MLX's squeeze of the leading 1 and its reshape of the update.
    from pagecheck.serving.step_page_table import StepPageTable
    from pagecheck.serving.step_paged_cache import StepPagedKvCache

    pool = TinyKvPagedPool(page_size=PAGE_SIZE)
    cache = StepPagedKvCache(pool, StepPageTable())
    cache.append(*random_chunk(np.random.default_rng(0), 2))  # storage (4 pages) for what follows
    mx.eval(*pool.storage)
    growths = pool.storage_growths
    chunk = random_chunk(np.random.default_rng(1), PAGE_SIZE + 2)  # spans pages
    mx.eval(*chunk)
    cache.append(*chunk)
    assert pool.storage_growths == growths
    assert all(graph_primitives(part) == {"Squeeze": 1, "Reshape": 1, "Scatter": 1} for part in pool.storage)


def test_a_failed_serving_chunk_append_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    from pagecheck.serving.step_page_table import StepPageTable
    from pagecheck.serving.step_paged_cache import StepPagedKvCache

    pool = TinyKvPagedPool(page_size=PAGE_SIZE)
    cache = StepPagedKvCache(pool, StepPageTable())
    cache.append(*random_chunk(np.random.default_rng(0), 3))
    before = (pool_state(pool), cache_state(cache))
    fail_on_call(page_write, "write_token_rows", 2, monkeypatch)
    with pytest.raises(RuntimeError):
        cache.append(*random_chunk(np.random.default_rng(1), 9))
    assert (pool_state(pool), cache_state(cache)) == before
