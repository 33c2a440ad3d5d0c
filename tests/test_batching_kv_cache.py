"""BatchingKvCache: padded batch metadata, empty slots, one shared pool, and checks before any change."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import numpy as np
import pytest

from pagecheck.impl.kv_cache import BatchingKvCache
from pagecheck.impl.page_pool import TinyKvPagedPool
from pagecheck.impl.paged_kv_cache import TinyKvPagedCache
from pagecheck.reference.arrays import to_numpy
from tests.kv_chunks import cache_state, fail_on_call, pool_state, random_chunk

PAGE_SIZE = 4


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(5)


def _prefilled(pool: TinyKvPagedPool, rng: np.random.Generator, length: int) -> TinyKvPagedCache:
    cache = TinyKvPagedCache(pool)
    cache.update_and_fetch_paged(*random_chunk(rng, length))
    return cache


def _batch_state(batch: BatchingKvCache, pool: TinyKvPagedPool) -> tuple[Any, ...]:
    slots = tuple(
        cache_state(batch.request(slot)) if slot in batch.active_request_ids else None
        for slot in range(batch.max_active_requests)
    )
    return slots, pool_state(pool), batch.HD


def test_rows_are_padded_to_the_widest_request_and_empty_slots_are_minus_one(
    rng: np.random.Generator,
) -> None:
    pool = TinyKvPagedPool(page_size=PAGE_SIZE)
    first = _prefilled(pool, rng, 3)
    second = _prefilled(pool, rng, 6)
    batch = BatchingKvCache(max_active_requests=3, max_seq_len=16)
    batch.add_request(first, 0)
    batch.add_request(second, 2)
    keys, values = random_chunk(rng, 1, batch=3)
    metadata = batch.update_and_fetch_paged(keys, values, mask_length=1, mask="causal")
    assert metadata.block_table.dtype == metadata.context_lens.dtype == mx.int32
    assert metadata.block_table.tolist() == [[0, -1], [-1, -1], [1, 2]]
    assert metadata.context_lens.tolist() == [4, 0, 7]
    assert metadata.key_pages.shape == metadata.value_pages.shape == (3, 2, PAGE_SIZE, 4)
    assert (metadata.page_size, metadata.mask, batch.HD) == (PAGE_SIZE, "causal", (2, 4))
    for slot, cache in [(0, first), (2, second)]:
        dense_keys, dense_values = cache.gather_dense()
        np.testing.assert_array_equal(to_numpy(dense_keys)[:, :, -1:], to_numpy(keys)[slot : slot + 1])
        np.testing.assert_array_equal(to_numpy(dense_values)[:, :, -1:], to_numpy(values)[slot : slot + 1])


def test_a_multi_token_step_moves_every_request_onto_new_pages(rng: np.random.Generator) -> None:
    pool = TinyKvPagedPool(page_size=PAGE_SIZE)
    batch = BatchingKvCache(max_active_requests=2)
    batch.add_request(_prefilled(pool, rng, 4), 0)
    batch.add_request(_prefilled(pool, rng, 1), 1)
    metadata = batch.update_and_fetch_paged(*random_chunk(rng, 5, batch=2))
    assert metadata.block_table.tolist() == [[0, 2, 3], [1, 4, -1]]
    assert metadata.context_lens.tolist() == [9, 6]
    assert metadata.key_pages.shape[0] == pool.num_pages == 5


def test_removing_a_request_returns_its_pages_and_empties_its_slot(rng: np.random.Generator) -> None:
    pool = TinyKvPagedPool(page_size=PAGE_SIZE)
    batch = BatchingKvCache(max_active_requests=2)
    leaving = _prefilled(pool, rng, 6)
    batch.add_request(leaving, 0)
    batch.add_request(_prefilled(pool, rng, 2), 1)
    batch.remove_request(0)
    assert (leaving.page_ids, pool.free_page_ids, batch.active_request_ids) == ([], [1, 0], [1])
    with pytest.raises(ValueError, match="id=0 is an empty slot"):
        batch.remove_request(0)
    metadata = batch.update_and_fetch_paged(*random_chunk(rng, 1, batch=2))
    assert metadata.block_table.tolist() == [[-1], [2]]
    assert metadata.context_lens.tolist() == [0, 3]
    batch.add_request(_prefilled(pool, rng, 5), 0)  # reuses the freed pages
    assert batch.request(0).page_ids == [0, 1]


def test_requests_on_different_pools_fail_before_any_row_changes(rng: np.random.Generator) -> None:
    first_pool, second_pool = TinyKvPagedPool(page_size=PAGE_SIZE), TinyKvPagedPool(page_size=PAGE_SIZE)
    first, second = _prefilled(first_pool, rng, 2), _prefilled(second_pool, rng, 2)
    batch = BatchingKvCache(max_active_requests=2, max_seq_len=8)
    batch.add_request(first, 0)
    batch.add_request(second, 1)
    before = (cache_state(first), pool_state(first_pool), cache_state(second), pool_state(second_pool))
    with pytest.raises(ValueError, match="share one page pool"):
        batch.update_and_fetch_paged(*random_chunk(rng, 1, batch=2), mask_length=1)
    assert (cache_state(first), pool_state(first_pool), cache_state(second), pool_state(second_pool)) == before
    assert batch.HD is None


def _batch_of_two(rng: np.random.Generator) -> tuple[BatchingKvCache, TinyKvPagedPool]:
    pool = TinyKvPagedPool(page_size=PAGE_SIZE)
    batch = BatchingKvCache(max_active_requests=3, max_seq_len=8)
    batch.add_request(_prefilled(pool, rng, 3), 0)
    batch.add_request(_prefilled(pool, rng, 6), 1)
    return batch, pool


INVALID_STEPS: list[tuple[str, tuple[tuple[int, ...], tuple[int, ...]], dict[str, Any], Any, str]] = [
    ("batch size", ((2, 2, 1, 4), (2, 2, 1, 4)), {}, mx.float32, "max_active_requests=3"),
    ("3-D keys", ((3, 2, 4), (3, 2, 4)), {}, mx.float32, "keys shape"),
    ("values shape", ((3, 2, 1, 4), (3, 2, 2, 4)), {}, mx.float32, "same shape"),
    ("mask length", ((3, 2, 1, 4), (3, 2, 1, 4)), {"mask_length": 2}, mx.float32, "mask_length=2"),
    ("max_seq_len", ((3, 2, 3, 4), (3, 2, 3, 4)), {}, mx.float32, "max_seq_len=8"),
    ("dtype", ((3, 2, 1, 4), (3, 2, 1, 4)), {}, mx.float16, "existing page storage dtype"),
    ("head dim", ((3, 2, 1, 8), (3, 2, 1, 8)), {}, mx.float32, "D=4"),
]


@pytest.mark.parametrize(
    "shapes, kwargs, dtype, field", [case[1:] for case in INVALID_STEPS], ids=[case[0] for case in INVALID_STEPS]
)
def test_invalid_steps_name_the_field_and_change_no_request(
    rng: np.random.Generator, shapes: tuple[tuple[int, ...], tuple[int, ...]], kwargs: dict[str, Any],
    dtype: mx.Dtype, field: str,
) -> None:
    batch, pool = _batch_of_two(rng)
    before = _batch_state(batch, pool)
    keys, values = (mx.zeros(shape, dtype=dtype) for shape in shapes)
    with pytest.raises(ValueError, match=field):
        batch.update_and_fetch_paged(keys, values, **kwargs)
    assert _batch_state(batch, pool) == before


def test_a_batch_without_requests_is_rejected(rng: np.random.Generator) -> None:
    batch = BatchingKvCache(max_active_requests=2)
    with pytest.raises(ValueError, match="no active requests"):
        batch.update_and_fetch_paged(*random_chunk(rng, 1, batch=2))


def test_a_write_failing_in_a_later_request_undoes_the_earlier_ones(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch, pool = _batch_of_two(rng)
    before = _batch_state(batch, pool)
    calls = fail_on_call(pool, "write_page_slice", 3, monkeypatch)
    with pytest.raises(RuntimeError, match="injected failure"):
        batch.update_and_fetch_paged(*random_chunk(rng, 2, batch=3))
    assert calls[0] == 3  # slot 0 wrote two pages, slot 1 failed on its first
    assert _batch_state(batch, pool) == before


@pytest.mark.parametrize(
    "id, prefilled_length, message",
    [(3, 1, "id=3"), (-1, 1, "id=-1"), (True, 1, "id=True"), (0, 1, "already holds"), (2, 9, "max_seq_len=8")],
)
def test_add_request_checks_the_slot_and_the_cache(
    rng: np.random.Generator, id: Any, prefilled_length: int, message: str
) -> None:
    batch, pool = _batch_of_two(rng)
    before = _batch_state(batch, pool)
    with pytest.raises(ValueError, match=message):
        batch.add_request(_prefilled(pool, rng, prefilled_length), id)
    assert _batch_state(batch, pool)[0] == before[0]


def test_add_request_rejects_other_objects_and_duplicates(rng: np.random.Generator) -> None:
    batch, _ = _batch_of_two(rng)
    with pytest.raises(ValueError, match="prefilled must be a TinyKvPagedCache"):
        batch.add_request(object(), 2)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="already in slot 1"):
        batch.add_request(batch.request(1), 2)
    assert batch.active_request_ids == [0, 1]


@pytest.mark.parametrize(
    "kwargs, field",
    [({"max_active_requests": 0}, "max_active_requests"), ({"max_active_requests": 2, "max_seq_len": 0}, "max_seq_len"),
     ({"max_active_requests": 10**11}, "max_active_requests=100000000000 must be a positive integer up to 65536")],
)
def test_constructor_arguments_are_checked(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        BatchingKvCache(**kwargs)


@pytest.mark.parametrize("length", [1, 2], ids=["decode", "prefill"])
def test_a_page_freed_behind_its_owners_back_is_refused_before_any_row_changes(length: int) -> None:
    """A batched prefill let the first request take the freed page while the second still listed it: one page
    in two caches. Decode refused it already; both now refuse before anything changes."""
    pool = TinyKvPagedPool(4)
    first, second = TinyKvPagedCache(pool), TinyKvPagedCache(pool)
    chunk = mx.ones((1, 1, 3, 8))
    first.append(chunk, chunk)
    second.append(chunk, chunk)
    batch = BatchingKvCache(2)
    batch.add_request(first, 0)
    batch.add_request(second, 1)
    pool.free_page(second.page_ids[0])
    before = pool_state(pool), [cache_state(c) for c in (first, second)]
    with pytest.raises(ValueError, match="is free"):
        batch.update_and_fetch_paged(mx.ones((2, 1, length, 8)), mx.ones((2, 1, length, 8)))
    assert (pool_state(pool), [cache_state(c) for c in (first, second)]) == before
