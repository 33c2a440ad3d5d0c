"""The pure-Python pool and cache: reuse order, growth counters, already-free, lazy tail."""

from __future__ import annotations

import numpy as np
import pytest

from pagecheck.reference.cache import TinyKvPagedCache
from pagecheck.reference.pool import TinyKvPagedPool


def chunk(length: int, heads: int = 2, dim: int = 4, start: float = 0.0) -> np.ndarray:
    """[1, heads, length, dim] whose every entry is its token's position, offset by `start`."""
    values = start + np.arange(length, dtype=np.float32)
    return np.broadcast_to(values[None, None, :, None], (1, heads, length, dim)).copy()


def test_fresh_ids_then_lifo_reuse() -> None:
    pool = TinyKvPagedPool(page_size=4)
    assert [pool.allocate_page() for _ in range(4)] == [0, 1, 2, 3]
    pool.free_page(1)
    pool.free_page(3)
    assert pool.allocate_page() == 3
    assert pool.allocate_page() == 1
    assert pool.allocate_page() == 4  # fresh id = number ever issued
    assert pool.reused_page_allocations == 2


def test_double_free_raises_already_free_and_changes_nothing() -> None:
    pool = TinyKvPagedPool(page_size=4)
    page = pool.allocate_page()
    pool.free_page(page)
    with pytest.raises(ValueError, match=f"Page {page} is already free"):
        pool.free_page(page)
    assert pool.free_page_ids == [page]


def test_storage_grows_geometrically_and_counts_copies() -> None:
    pool = TinyKvPagedPool(page_size=2)
    cache = TinyKvPagedCache(pool)
    cache.update_and_fetch_paged(chunk(2), chunk(2))
    assert (pool.capacity, pool.storage_growths) == (4, 1)  # creation counts, copying nothing
    cache.update_and_fetch_paged(chunk(8), chunk(8))  # pages 1..4: the fifth page grows 4 -> 8
    assert (pool.capacity, pool.storage_growths, pool.copied_pages_on_growth) == (8, 2, 4)
    page_bytes = 2 * 2 * 4 * 8  # heads * page_size * dim * float64
    assert pool.copied_bytes_on_growth == 2 * 4 * page_bytes  # keys and values


def test_cache_fills_the_tail_before_allocating() -> None:
    pool = TinyKvPagedPool(page_size=4)
    cache = TinyKvPagedCache(pool)
    cache.update_and_fetch_paged(chunk(3), chunk(3))
    assert cache.page_lens == [3]
    cache.update_and_fetch_paged(chunk(1, start=3), chunk(1, start=3))
    assert (cache.page_lens, pool.num_pages) == ([4], 1)
    cache.update_and_fetch_paged(chunk(6, start=4), chunk(6, start=4))
    assert cache.page_lens == [4, 4, 2]
    keys, _ = cache.gather_dense()
    np.testing.assert_array_equal(keys[0, 0, :, 0], np.arange(10))
    np.testing.assert_array_equal(cache.block_table(max_pages=5), [[0, 1, 2, -1, -1]])
    np.testing.assert_array_equal(cache.context_lens(), [10])


@pytest.mark.parametrize("width", [2, -1, 3.0, True, 2**29 + 1, 2**40])  # pages of 4: 2**29 hold the longest context
def test_block_table_widths_outside_the_pages_a_context_can_hold_are_refused(width: object) -> None:
    cache = TinyKvPagedCache(TinyKvPagedPool(page_size=4))
    cache.update_and_fetch_paged(chunk(9), chunk(9))
    with pytest.raises(ValueError, match=f"max_pages={width!r} must be an int in num_pages=3..{2**29}"):
        cache.block_table(max_pages=width)


@pytest.mark.parametrize("call", ["gather_dense", "paged_metadata"])
def test_reading_a_cache_before_any_write_names_the_missing_storage(call: str) -> None:
    cache = TinyKvPagedCache(TinyKvPagedPool(page_size=4))
    with pytest.raises(ValueError, match=f"{call}: the pool has no page storage yet"):
        getattr(cache, call)()


def test_release_frees_every_page_once_and_rewind_frees_empty_pages() -> None:
    pool = TinyKvPagedPool(page_size=4)
    cache = TinyKvPagedCache(pool)
    cache.update_and_fetch_paged(chunk(9), chunk(9))
    cache.rewind(5)
    assert (cache.page_lens, pool.free_page_ids) == ([4], [2, 1])
    cache.release()
    assert sorted(pool.free_page_ids) == [0, 1, 2]
    with pytest.raises(ValueError, match="already free"):
        pool.free_page(0)


def test_failed_append_leaves_pool_and_cache_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    pool = TinyKvPagedPool(page_size=4)
    cache = TinyKvPagedCache(pool)
    cache.update_and_fetch_paged(chunk(3), chunk(3))
    before = (list(cache.page_ids), list(cache.page_lens), pool.num_pages, pool.free_page_ids, pool.key_pages.copy())
    real_write, calls = pool.write_page_slice, []

    def fail_on_second(*args: object) -> None:
        calls.append(args)
        if len(calls) == 2:
            raise RuntimeError("injected write failure")
        real_write(*args)

    monkeypatch.setattr(pool, "write_page_slice", fail_on_second)
    with pytest.raises(RuntimeError, match="injected"):
        cache.update_and_fetch_paged(chunk(6, start=3), chunk(6, start=3))
    assert (cache.page_ids, cache.page_lens, pool.num_pages, pool.free_page_ids) == before[:4]
    np.testing.assert_array_equal(pool.key_pages, before[4])


@pytest.mark.parametrize(
    "key, message",
    [
        (np.zeros((2, 2, 1, 4), np.float32), "key shape"),
        (np.zeros((1, 3, 1, 4), np.float32), "does not match pool"),
        (np.zeros((1, 2, 1, 4), np.int32), "key dtype"),
    ],
)
def test_bad_chunks_are_rejected_without_state_change(key: np.ndarray, message: str) -> None:
    pool = TinyKvPagedPool(page_size=4)
    cache = TinyKvPagedCache(pool)
    cache.update_and_fetch_paged(chunk(1), chunk(1))
    with pytest.raises(ValueError, match=message):
        cache.update_and_fetch_paged(key, key)
    assert (cache.offset, pool.num_pages) == (1, 1)
