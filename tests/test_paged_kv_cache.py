"""TinyKvPagedCache: tail-first appends, block tables, rewind, release, and all-or-nothing appends."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import mlx.core as mx
import numpy as np
import pytest

from pagecheck.impl.page_pool import TinyKvPagedPool
from pagecheck.impl import paged_kv_cache
from pagecheck.impl.paged_kv_cache import TinyKvPagedCache
from pagecheck.impl.paged_metadata import PagedKvMetadata
from pagecheck.reference.arrays import to_numpy
from tests.kv_chunks import cache_state, fail_on_call, pool_state, random_chunk

PAGE_SIZE = 4


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(11)


@pytest.fixture
def cache() -> TinyKvPagedCache:
    return TinyKvPagedCache(TinyKvPagedPool(page_size=PAGE_SIZE))


def _fill(cache: TinyKvPagedCache, rng: np.random.Generator, lengths: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Append chunks of the given lengths; return their concatenation as NumPy."""
    keys, values = [], []
    for length in lengths:
        key, value = random_chunk(rng, length)
        cache.update_and_fetch_paged(key, value)
        keys.append(to_numpy(key))
        values.append(to_numpy(value))
    return np.concatenate(keys, axis=2), np.concatenate(values, axis=2)


def _assert_gathers(cache: TinyKvPagedCache, keys: np.ndarray, values: np.ndarray) -> None:
    dense_keys, dense_values = cache.gather_dense()
    np.testing.assert_array_equal(to_numpy(dense_keys), keys)
    np.testing.assert_array_equal(to_numpy(dense_values), values)


@pytest.mark.parametrize(
    "lengths",
    [[3, 2, 5], [4, 4], [1] * 9, [9], [2, 2, 4, 1], [5, 3], [3, 1, 1, 7]],
    ids=lambda lengths: "-".join(map(str, lengths)),
)
def test_appends_fill_the_tail_page_before_allocating(
    rng: np.random.Generator, lengths: list[int], cache: TinyKvPagedCache
) -> None:
    pool = cache.pool
    total = 0
    keys, values = [], []
    for length in lengths:
        key, value = random_chunk(rng, length)
        cache.update_and_fetch_paged(key, value)
        keys.append(to_numpy(key))
        values.append(to_numpy(value))
        total += length
        pages = -(-total // PAGE_SIZE)
        assert pool.num_pages == cache.num_pages == pages
        assert cache.page_lens == [PAGE_SIZE] * (pages - 1) + [total - (pages - 1) * PAGE_SIZE]
        assert cache.offset == total
        _assert_gathers(cache, np.concatenate(keys, axis=2), np.concatenate(values, axis=2))


def test_a_chunk_spanning_pages_lands_slot_by_slot(rng: np.random.Generator) -> None:
    pool = TinyKvPagedPool(page_size=PAGE_SIZE)
    other = TinyKvPagedCache(pool)
    cache = TinyKvPagedCache(pool)
    _fill(cache, rng, [3])
    _fill(other, rng, [1])  # takes page 1, so the spanning chunk gets pages 0, 2, 3
    key, value = random_chunk(rng, 7)
    cache.update_and_fetch_paged(key, value)
    assert cache.page_ids == [0, 2, 3]
    assert cache.page_lens == [4, 4, 2]
    key_np = to_numpy(key)
    np.testing.assert_array_equal(to_numpy(pool.read_page(0)[0])[:, :, 3:], key_np[:, :, :1])
    np.testing.assert_array_equal(to_numpy(pool.read_page(2)[0]), key_np[:, :, 1:5])
    np.testing.assert_array_equal(to_numpy(pool.read_page(3)[0])[:, :, :2], key_np[:, :, 5:])
    assert np.isnan(to_numpy(pool.read_page(3)[1])[:, :, 2:]).all()


@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16, mx.float16])
def test_gather_dense_and_update_and_fetch_return_the_written_tokens(
    rng: np.random.Generator, cache: TinyKvPagedCache, dtype: mx.Dtype
) -> None:
    first_key, first_value = random_chunk(rng, 6, dtype=dtype)
    cache.update_and_fetch(first_key, first_value)
    key, value = random_chunk(rng, 3, dtype=dtype)
    keys, values, offset, mask = cache.update_and_fetch(key, value, mask_length=3, mask="causal")
    assert (offset, mask) == (9, "causal")
    assert keys.dtype == values.dtype == dtype
    np.testing.assert_array_equal(to_numpy(keys), to_numpy(mx.concatenate([first_key, key], axis=2)))
    np.testing.assert_array_equal(to_numpy(values), to_numpy(mx.concatenate([first_value, value], axis=2)))


def test_block_table_is_one_object_until_the_page_list_changes(
    rng: np.random.Generator, cache: TinyKvPagedCache
) -> None:
    _fill(cache, rng, [3])
    first = cache.block_table()
    assert cache.block_table() is first
    _fill(cache, rng, [1])  # fills the tail page
    assert cache.block_table() is first
    _fill(cache, rng, [1])  # allocates a page
    second = cache.block_table()
    assert second is not first
    assert second.tolist() == [[0, 1]]
    cache.rewind(1)  # frees the new page
    assert cache.block_table() is not second
    third = cache.block_table()
    cache.rewind(2)  # stays within page 0
    assert cache.block_table() is third
    cache.release()
    assert cache.block_table() is not third
    assert cache.block_table().shape == (1, 0)


def test_page_id_tuple_is_one_object_until_the_page_list_changes(
    rng: np.random.Generator, cache: TinyKvPagedCache
) -> None:
    _fill(cache, rng, [3])
    first = cache.page_id_tuple
    assert first == (0,) and cache.page_id_tuple is first
    _fill(cache, rng, [1])  # fills the tail page
    assert cache.page_id_tuple is first
    checkpoint, pool_checkpoint = cache.checkpoint(), cache.pool.checkpoint()
    _fill(cache, rng, [1])  # allocates a page
    assert cache.page_id_tuple == (0, 1)
    cache.pool.rollback(pool_checkpoint)
    cache.rollback(checkpoint)  # the appended page is dropped again
    assert cache.page_id_tuple == (0,)
    _fill(cache, rng, [2])
    assert cache.page_id_tuple == tuple(cache.page_ids) == (0, 1)
    cache.rewind(2)  # frees the new page
    assert cache.page_id_tuple == (0,)
    cache.release()
    assert cache.page_id_tuple == ()


def test_block_table_pads_with_minus_one_and_rejects_narrow_widths(
    rng: np.random.Generator, cache: TinyKvPagedCache
) -> None:
    _fill(cache, rng, [9])
    table = cache.block_table(max_pages=5)
    assert table.dtype == mx.int32
    assert table.tolist() == [[0, 1, 2, -1, -1]]
    assert cache.block_table(max_pages=5) is table
    assert cache.block_table().tolist() == [[0, 1, 2]]
    for width in [2, -1, 3.0, True, 2**29 + 1, 2**40]:  # pages of 4: 2**29 hold the longest context
        with pytest.raises(ValueError, match="max_pages"):
            cache.block_table(max_pages=width)


def test_paged_metadata_describes_the_pool_and_this_request(rng: np.random.Generator) -> None:
    pool = TinyKvPagedPool(page_size=PAGE_SIZE)
    other = TinyKvPagedCache(pool)
    cache = TinyKvPagedCache(pool)
    with pytest.raises(ValueError, match="no page storage"):
        cache.paged_metadata()
    _fill(other, rng, [2])
    key, value = random_chunk(rng, 5)
    metadata = cache.update_and_fetch_paged(key, value, mask_length=5, mask="causal")
    assert isinstance(metadata, PagedKvMetadata)
    assert metadata.key_pages.shape == metadata.value_pages.shape == (3, 2, PAGE_SIZE, 4)
    assert metadata.block_table.tolist() == [[1, 2]]
    assert metadata.context_lens.dtype == mx.int32
    assert metadata.context_lens.tolist() == [5]
    assert (metadata.page_size, metadata.mask) == (PAGE_SIZE, "causal")
    np.testing.assert_array_equal(to_numpy(metadata.key_pages), to_numpy(pool.key_pages))
    with pytest.raises(AttributeError):
        metadata.page_size = 8  # type: ignore[misc]


def test_rewind_across_page_boundaries_frees_emptied_pages(rng: np.random.Generator, cache: TinyKvPagedCache) -> None:
    pool = cache.pool
    keys, values = _fill(cache, rng, [4, 3, 2])
    assert cache.page_lens == [4, 4, 1]
    cache.rewind(3)
    assert (cache.page_ids, cache.page_lens, cache.offset) == ([0, 1], [4, 2], 6)
    assert (pool.num_pages, pool.free_page_ids) == (3, [2])
    _assert_gathers(cache, keys[:, :, :6], values[:, :, :6])
    cache.rewind(0)
    assert cache.page_lens == [4, 2]
    cache.rewind(2)
    assert (cache.page_ids, cache.page_lens) == ([0], [4])
    more_keys, more_values = _fill(cache, rng, [5])
    assert cache.page_ids == [0, 1, 2]  # pages come back in their old order
    _assert_gathers(
        cache,
        np.concatenate([keys[:, :, :4], more_keys], axis=2),
        np.concatenate([values[:, :, :4], more_values], axis=2),
    )
    cache.rewind(cache.offset)
    assert (cache.page_ids, cache.offset, pool.num_free_pages) == ([], 0, 3)


@pytest.mark.parametrize("n", [4, -1, 1.0, True])
def test_rewind_rejects_counts_outside_the_context(
    rng: np.random.Generator, cache: TinyKvPagedCache, n: Any
) -> None:
    _fill(cache, rng, [3])
    before = (cache_state(cache), pool_state(cache.pool))
    with pytest.raises(ValueError, match="rewind n"):
        cache.rewind(n)
    assert (cache_state(cache), pool_state(cache.pool)) == before


def test_release_frees_each_page_once_and_leaves_a_reusable_cache(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, cache: TinyKvPagedCache
) -> None:
    pool = cache.pool
    _fill(cache, rng, [10])
    freed: list[int] = []
    original_free = pool.free_page
    monkeypatch.setattr(pool, "free_page", lambda page_id: (freed.append(page_id), original_free(page_id)))
    cache.release()
    assert sorted(freed) == [0, 1, 2]
    assert (cache.page_ids, cache.page_lens, cache.offset, cache.num_pages) == ([], [], 0, 0)
    cache.release()
    assert sorted(freed) == [0, 1, 2]
    keys, values = _fill(cache, rng, [6])
    assert cache.page_ids == [0, 1]
    _assert_gathers(cache, keys, values)


def test_release_refuses_when_a_page_was_freed_behind_its_back(
    rng: np.random.Generator, cache: TinyKvPagedCache
) -> None:
    pool = cache.pool
    _fill(cache, rng, [6])
    pool.free_page(1)
    before = (cache_state(cache), pool_state(pool))
    with pytest.raises(ValueError, match=r"page_ids=\[1\]"):
        cache.release()
    assert (cache_state(cache), pool_state(pool)) == before


@pytest.mark.parametrize(
    "prefill",
    [[], [2], [4], [3, 2]],
    ids=["empty cache", "half tail", "full tail", "two chunks"],
)
def test_a_failed_second_page_write_undoes_the_whole_append(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, prefill: list[int]
) -> None:
    pool = TinyKvPagedPool(page_size=PAGE_SIZE)
    neighbour = TinyKvPagedCache(pool)
    cache = TinyKvPagedCache(pool)
    _fill(neighbour, rng, [PAGE_SIZE])
    neighbour.release()  # leaves a free page to reuse
    keys, values = _fill(cache, rng, prefill) if prefill else (None, None)
    before = (cache_state(cache), pool_state(pool))
    table = cache.block_table()
    calls = fail_on_call(pool, "write_page_slice", 2, monkeypatch)
    key, value = random_chunk(rng, 3 * PAGE_SIZE)  # spans several pages and grows storage
    with pytest.raises(RuntimeError, match="injected failure"):
        cache.update_and_fetch_paged(key, value)
    assert calls[0] == 2
    assert (cache_state(cache), pool_state(pool)) == before
    assert cache.block_table() is table
    monkeypatch.undo()
    cache.update_and_fetch_paged(key, value)
    if keys is None or values is None:
        _assert_gathers(cache, to_numpy(key), to_numpy(value))
    else:
        _assert_gathers(
            cache,
            np.concatenate([keys, to_numpy(key)], axis=2),
            np.concatenate([values, to_numpy(value)], axis=2),
        )


def test_a_failed_append_undoes_the_storage_growth_it_caused(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, cache: TinyKvPagedCache
) -> None:
    pool = cache.pool
    _fill(cache, rng, [4 * PAGE_SIZE - 1])  # four pages, one free slot in the tail
    before = (cache_state(cache), pool_state(pool))
    original_write = pool.write_page_slice
    capacities: list[int] = []

    def fail_second(page_id: int, start: int, key: mx.array, value: mx.array) -> None:
        capacities.append(pool.capacity)
        if len(capacities) == 2:
            raise RuntimeError("injected failure after growth")
        original_write(page_id, start, key, value)

    monkeypatch.setattr(pool, "write_page_slice", fail_second)
    with pytest.raises(RuntimeError, match="after growth"):
        cache.update_and_fetch_paged(*random_chunk(rng, 2))
    assert capacities == [4, 8]
    assert (cache_state(cache), pool_state(pool)) == before
    assert (pool.capacity, pool.storage_growths, pool.copied_pages_on_growth) == (4, 1, 0)


def test_a_failed_first_append_leaves_the_pool_without_storage(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, cache: TinyKvPagedCache
) -> None:
    pool = cache.pool
    fail_on_call(pool, "write_page_slice", 2, monkeypatch)
    with pytest.raises(RuntimeError, match="injected failure"):
        cache.update_and_fetch_paged(*random_chunk(rng, 6))
    assert pool_state(pool) == (0, 0, (), (), 0, 0, 0, 0, 0, None, None)
    assert cache_state(cache) == ((), (), 0, 0)


def test_invalid_appends_change_nothing(rng: np.random.Generator, cache: TinyKvPagedCache) -> None:
    _fill(cache, rng, [4])
    before = (cache_state(cache), pool_state(cache.pool))
    key, value = random_chunk(rng, 1)
    cases = [
        ((key.astype(mx.bfloat16), value.astype(mx.bfloat16)), {}, "existing page storage dtype"),
        ((key, value[:, :, :0]), {}, "same shape"),
        ((key, value), {"mask_length": 2}, "mask_length"),
        ((mx.zeros((1, 3, 1, 4)), mx.zeros((1, 3, 1, 4))), {}, "H_kv"),
    ]
    for args, kwargs, field in cases:
        with pytest.raises(ValueError, match=field):
            cache.update_and_fetch_paged(*args, **kwargs)
        assert (cache_state(cache), pool_state(cache.pool)) == before


def test_materialize_evaluates_page_storage_without_gathering(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, cache: TinyKvPagedCache
) -> None:
    pool = cache.pool
    _fill(cache, rng, [5])

    def no_gather() -> None:
        raise AssertionError("materialize must not gather dense K/V")

    evaluated: list[tuple[mx.array, ...]] = []
    monkeypatch.setattr(cache, "gather_dense", no_gather)
    monkeypatch.setattr(mx, "eval", lambda *arrays: evaluated.append(arrays))
    cache.materialize()
    assert len(evaluated) == 1
    assert [array.shape for array in evaluated[0]] == [pool.key_pages.shape, pool.value_pages.shape]


def test_the_cache_needs_a_page_pool() -> None:
    with pytest.raises(ValueError, match="pool"):
        TinyKvPagedCache(object())  # type: ignore[arg-type]


@pytest.mark.parametrize(("count", "message"), [
    (-1, "count=-1 must be an int >= 0"), (2.0, "count=2.0 must be an int >= 0"),
    (True, "count=True must be an int >= 0"),
    (2**31 - 5, r"count=2147483643 would take the context from 5 past 2147483647 positions"),
    ("memory", r"K and V storage of 32 pages .* above MLX's memory limit"),
])
def test_a_claim_that_cannot_be_met_is_refused_before_anything_is_claimed(
    rng: np.random.Generator, cache: TinyKvPagedCache, count: Any, message: str
) -> None:
    """"memory": 20 more pages would grow storage from 4 rows to 32 (8, 16, 32), past a memory limit set just
    above the 4 rows; refused up front, where the claims once ran page by page until the growth failed with
    some of them taken."""
    _fill(cache, rng, [5])
    before = (cache_state(cache), pool_state(cache.pool))
    previous = mx.set_memory_limit(cache.pool.storage_nbytes * 3) if count == "memory" else None
    try:
        with pytest.raises(ValueError, match=message):
            cache.claim_token_slots(20 * PAGE_SIZE if count == "memory" else count)
    finally:
        if previous is not None:
            mx.set_memory_limit(previous)
    assert (cache_state(cache), pool_state(cache.pool)) == before
    cache.claim_token_slots(20 * PAGE_SIZE)  # within the limit restored


def test_a_checkpoint_undoes_appends_only(rng: np.random.Generator, cache: TinyKvPagedCache) -> None:
    _fill(cache, rng, [PAGE_SIZE + 1])
    before = cache_state(cache)
    checkpoint = cache.checkpoint()
    cache.claim_token_slots(2 * PAGE_SIZE)  # fills the tail page, then two more
    cache.rollback(checkpoint)
    assert cache_state(cache) == before
    cache.rewind(PAGE_SIZE)  # not an append: the checkpoint cannot say what to restore
    with pytest.raises(ValueError, match="only appends may follow a checkpoint"):
        cache.rollback(checkpoint)


def test_an_append_past_the_longest_context_is_refused_before_any_write(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, cache: TinyKvPagedCache
) -> None:
    """append takes claim_token_slots' context check: with the limit at 10 positions, 6 tokens after 5 are
    refused, naming the length and the limit, before any page is written (it once wrote them all)."""
    _fill(cache, rng, [5])
    before = (cache_state(cache), pool_state(cache.pool))
    monkeypatch.setattr(paged_kv_cache, "MAX_CONTEXT", 10)
    writes = fail_on_call(cache.pool, "write_page_slice", 0, monkeypatch)  # counts, never fails
    with pytest.raises(ValueError, match=r"key length S=6 would take the context from 5 past 10 positions"):
        cache.update_and_fetch_paged(*random_chunk(rng, 6))
    assert writes[0] == 0
    assert (cache_state(cache), pool_state(cache.pool)) == before
    cache.update_and_fetch_paged(*random_chunk(rng, 5))  # up to the limit


def test_an_append_whose_pages_the_pool_could_not_store_is_refused_before_any_write(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, cache: TinyKvPagedCache
) -> None:
    """append takes claim_token_slots' room check: 20 more pages would grow storage past a memory limit set just
    above the 4 rows it has. The growth used to fail only after the first pages of the chunk were written."""
    _fill(cache, rng, [5])
    before = (cache_state(cache), pool_state(cache.pool))
    writes = fail_on_call(cache.pool, "write_page_slice", 0, monkeypatch)
    previous = mx.set_memory_limit(cache.pool.storage_nbytes * 3)
    try:
        with pytest.raises(ValueError, match=r"K and V storage of 32 pages .* above MLX's memory limit"):
            cache.update_and_fetch_paged(*random_chunk(rng, 20 * PAGE_SIZE))
    finally:
        mx.set_memory_limit(previous)
    assert writes[0] == 0
    assert (cache_state(cache), pool_state(cache.pool)) == before


HUGE_CALLS = """
import resource, sys
limit = 2 * 2**30
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
import mlx.core as mx
from pagecheck.impl import BatchingKvCache, TinyKvPagedCache, TinyKvPagedPool

def outcome(name, call, cache):
    try:
        call()
        print(name, "accepted")
    except ValueError as error:
        print(name, "ValueError", error, "| offset", cache.offset, "pages", cache.pool.num_pages)

chunk = mx.zeros((1, 1, 2_000_000, 1))  # lazy: 2 million tokens, never made
cache = TinyKvPagedCache(TinyKvPagedPool(page_size=1))
outcome("append", lambda: cache.append(chunk, chunk), cache)
batch = BatchingKvCache(1)
request = TinyKvPagedCache(TinyKvPagedPool(page_size=1))
request.append(mx.zeros((1, 1, 1, 1)), mx.zeros((1, 1, 1, 1)))
batch.add_request(request, 0)
outcome("batch", lambda: batch.update_and_fetch_paged(chunk, chunk), request)
claims = TinyKvPagedCache(TinyKvPagedPool(page_size=2**20))
outcome("claim", lambda: claims.claim_token_slots(10**9), claims)
"""


def test_appends_and_claims_too_large_to_build_are_refused_before_they_fill_memory() -> None:
    """Run in a child limited to 2 GiB, so a call that builds them fails this test instead of the test run. A
    2-million-token chunk in pages of 1 is 2 million lazy page writes (16 GB of graph): the append ended in
    std::bad_alloc (abort). A claim of 10**9 positions listed a Python int per position (MemoryError)."""
    done = subprocess.run([sys.executable, "-c", HUGE_CALLS], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"the child process ended with {done.returncode}: {done.stderr[-2000:]}"
    lines = dict(line.split(" ", 1) for line in done.stdout.strip().splitlines())
    limit = paged_kv_cache.MAX_APPEND_PAGE_WRITES
    writes = rf"needs 2000000 page writes of page_size=1, more than the {limit} one append makes"
    assert re.match(rf"ValueError key length S=2000000 {writes}.* \| offset 0 pages 0$", lines["append"]), lines
    assert re.match(rf"ValueError key length S=2000000 {writes}.* \| offset 1 pages 1$", lines["batch"]), lines
    claim = rf"count=1000000000 is more than the {paged_kv_cache.MAX_CLAIM_TOKENS} positions one claim lists"
    assert re.match(rf"ValueError {claim}.* \| offset 0 pages 0$", lines["claim"]), lines


def test_the_append_and_claim_limits_refuse_only_what_is_past_them(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch, cache: TinyKvPagedCache
) -> None:
    """With the limits at 8 page writes and 16 positions: a claim of 16 goes through and one of 17 does not; an
    append of 8 page writes (the tail page's free slot, then 7 pages) goes through and one of 9 does not."""
    monkeypatch.setattr(paged_kv_cache, "MAX_APPEND_PAGE_WRITES", 8)
    monkeypatch.setattr(paged_kv_cache, "MAX_CLAIM_TOKENS", 16)
    with pytest.raises(ValueError, match=r"count=17 is more than the 16 positions one claim lists"):
        cache.claim_token_slots(17)
    other = TinyKvPagedCache(TinyKvPagedPool(PAGE_SIZE))
    other.update_and_fetch_paged(*random_chunk(rng, 1))
    assert len(other.claim_token_slots(16)[0]) == 16  # the limit itself goes through
    page_ids, _ = cache.claim_token_slots(15)  # leaves one free slot in the tail page
    assert len(page_ids) == 15 and cache.offset == 15
    before = (cache_state(cache), pool_state(cache.pool))
    with pytest.raises(ValueError, match=r"key length S=30 needs 9 page writes of page_size=4, more than the 8 one "
                                         r"append makes .* append at most 28 tokens at a time"):
        cache.update_and_fetch_paged(*random_chunk(rng, 1 + 7 * PAGE_SIZE + 1))
    assert (cache_state(cache), pool_state(cache.pool)) == before
    cache.update_and_fetch_paged(*random_chunk(rng, 1 + 7 * PAGE_SIZE))
    assert cache.offset == 15 + 1 + 7 * PAGE_SIZE and cache.num_pages == 4 + 7


@pytest.mark.parametrize("checkpoint", [None, (0, 0, 0, ()), "checkpoint"], ids=["None", "tuple", "str"])
def test_rollback_needs_a_cache_checkpoint(
    rng: np.random.Generator, cache: TinyKvPagedCache, checkpoint: Any
) -> None:
    """None raised AttributeError; a PoolCheckpoint (the pool's, not the cache's) too."""
    _fill(cache, rng, [5])
    before = cache_state(cache)
    for wrong in (checkpoint, cache.pool.checkpoint()):
        with pytest.raises(ValueError, match=r"checkpoint=.* must be a CacheCheckpoint from checkpoint\(\), got"):
            cache.rollback(wrong)
        assert cache_state(cache) == before
