"""lazy_tail: a cache holds ceil(context / page_size) pages, and takes a new one only when its tail is full.

During decode, page counts are checked at every step: the cache's pages, the
fill of each page, and (beyond the course, which never counts them after a
decode) the pool's issued-page count, which may never run ahead of what the
live caches hold, and whose ids stay below that count (a page taken without
being counted shows as an id past it): pages a release gave back are reused
before any new id is issued.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagecheck.invariants.calls import course_paged_append, equals_list
from pagecheck.invariants.course import (
    COURSE_FIRST_PAGED_APPEND, COURSE_HEAD_DIM, COURSE_MAX_PAGES, DAY_3, DAY_4, Geometry, split_at_the_course,
)
from pagecheck.invariants.strategies import SMALL_PAGE_SIZES, seeds
from pagecheck.invariants.verdict import expect, expect_arrays, same_tokens
from pagecheck.invariants.workload import WrittenKv
from pagecheck.reference.arrays import to_numpy

INVARIANT = "lazy_tail"
pytestmark = pytest.mark.invariant(INVARIANT)

HEAD_DIM = 32


def _pages_for(tokens: int, page_size: int) -> int:
    return -(-tokens // page_size)


def _check_pages(cache: object, tokens: int, page_size: int, step: str) -> None:
    want = _pages_for(tokens, page_size)
    expect(cache.num_pages == want, INVARIANT, f"{step}: num_pages={cache.num_pages}, ceil({tokens}/{page_size})={want}")
    expect(len(cache.page_ids) == want, INVARIANT, f"{step}: page_ids={list(cache.page_ids)}, expected {want} pages")
    fills = [int(n) for n in cache.page_lens]
    want_fills = [page_size] * (want - 1) + [tokens - (want - 1) * page_size] if want else []
    expect(fills == want_fills, INVARIANT, f"{step}: page_lens={fills}, expected {want_fills}")


@split_at_the_course(f"{DAY_3}::test_task_1_paged_cache_matches_full_cache",
                     Geometry(page_sizes=SMALL_PAGE_SIZES, kv_heads=(2,), head_dim=HEAD_DIM))
@given(prefill=st.integers(0, 40), decode_steps=st.integers(1, 20), seed=seeds(), data=st.data())
def test_decode_takes_a_page_only_when_the_tail_is_full(
    pool_type: type, cache_type: type, geometry: Geometry, prefill: int, decode_steps: int, seed: int,
    data: st.DataObject,
) -> None:
    page_size = data.draw(st.sampled_from(geometry.page_sizes), label="page_size")
    if geometry.course:  # a request of the course's size (COURSE_MAX_PAGES pages at most), opened as the course does
        most = COURSE_MAX_PAGES * page_size
        prefill = max(min(prefill, most - 1), COURSE_FIRST_PAGED_APPEND)
        decode_steps = min(decode_steps, most - prefill)
    rng = np.random.default_rng(seed)
    pool = pool_type(page_size)
    cache = cache_type(pool)
    record = WrittenKv(2, geometry.head_dim, "float32")
    if prefill:
        chunk = record.make_chunk(rng, prefill)
        # A course case's prefill in pieces that each open one new page at most, as the course's paged appends whose
        # pages it reads (calls.course_paged_append).
        if geometry.course:
            course_paged_append(cache, *chunk)
        else:
            cache.update_and_fetch_paged(*chunk)
        _check_pages(cache, prefill, page_size, f"after a prefill of {prefill}")
    for _ in range(decode_steps):
        before = cache.num_pages
        tail_full = record.length % page_size == 0
        cache.update_and_fetch_paged(*record.make_chunk(rng, 1))
        step = f"decode to {record.length} tokens (page_size={page_size}, prefill {prefill})"
        _check_pages(cache, record.length, page_size, step)
        expect(
            cache.num_pages - before == int(tail_full), INVARIANT,
            f"{step}: pages went {before} -> {cache.num_pages} with the tail {'full' if tail_full else 'not full'}",
        )
        if not geometry.course:
            # The course never counts a pool's pages after a one-token update_and_fetch_paged: there a cache may take
            # its next page ahead once a decode fills the tail (held in reserve, not in page_ids).
            expect(
                pool.num_pages == cache.num_pages, INVARIANT,
                f"{step}: the pool issued {pool.num_pages} pages for a cache holding {cache.num_pages}",
            )


@pytest.mark.course(f"{DAY_4}::test_paged_attention_preserves_bfloat16_for_decode")
def test_a_decode_after_another_request_takes_the_next_page(
    pool_type: type, cache_type: type, rng: np.random.Generator
) -> None:
    # The course's own sequence, pages of 32: a request fills pages 0 and 1, a second request fills page 2, then
    # the first one's decode token takes page 3. A page taken before the tail filled shows in these ids.
    page_size = 32
    pool = pool_type(page_size)
    cache, blocker = cache_type(pool), cache_type(pool)
    # The course's chunks and calls too: 2 kv heads of head dim 128, in bfloat16, the prefills through
    # update_and_fetch (the paged append takes bfloat16 one decode token at a time there).
    cache.update_and_fetch(*WrittenKv(2, 128, "bfloat16").make_chunk(rng, 2 * page_size))
    blocker.update_and_fetch(*WrittenKv(2, 128, "bfloat16").make_chunk(rng, page_size))
    record = WrittenKv(2, 128, "bfloat16")
    cache.update_and_fetch_paged(*record.make_chunk(rng, 1))
    # Read as the course's asserts read them: `cache.page_ids[:2] == [0, 1]` (a list) and `cache.page_ids[2] == 3`.
    ids = cache.page_ids
    expect(
        len(ids) == 3 and equals_list(ids[:2], [0, 1]) and int(ids[2]) == 3, INVARIANT,
        f"a request of {2 * page_size} tokens, then another of {page_size}, then one decode token of the first "
        f"(page_size={page_size}): the first holds pages {ids!r} and the other {list(blocker.page_ids)}, expected "
        "the list [0, 1, 3] (the course's own sequence)",
    )


@pytest.mark.beyond_course
@pytest.mark.parametrize("page_size", [1, 3, 16])
def test_pool_never_issues_ahead_of_live_caches(
    pool_type: type, cache_type: type, page_size: int, rng: np.random.Generator
) -> None:
    pool = pool_type(page_size)
    caches = [cache_type(pool) for _ in range(3)]
    records = [WrittenKv(2, HEAD_DIM, "float32") for _ in caches]
    for cache, record, prefill in zip(caches, records, (page_size, page_size + 1, 2 * page_size - 1)):
        cache.update_and_fetch_paged(*record.make_chunk(rng, prefill))
    for step in range(2 * page_size + 2):
        for index, (cache, record) in enumerate(zip(caches, records)):
            cache.update_and_fetch_paged(*record.make_chunk(rng, 1))
            held = sum(_pages_for(r.length, page_size) for r in records)
            where = f"decode step {step}, request {index}"
            expect(
                pool.num_pages - pool.num_free_pages == held and pool.num_pages == held, INVARIANT,
                f"{where}: pool issued {pool.num_pages} ({pool.num_free_pages} free) "
                f"while the caches need {held} (contexts {[r.length for r in records]}, page_size={page_size})",
            )
            # The counts above are the pool's own word; the ids the caches hold are what it really issued. Ids
            # index storage rows, so each is below num_pages, and no two caches share one: a page the pool took
            # without counting it shows as an id at or past its count.
            ids = [[int(p) for p in cache.page_ids] for cache in caches]
            flat = [p for row in ids for p in row]
            expect(
                len(set(flat)) == len(flat) and all(0 <= p < pool.num_pages for p in flat), INVARIANT,
                f"{where}: the caches hold pages {ids}, but the pool counts {pool.num_pages} issued "
                f"(ids 0..{pool.num_pages - 1}, each held once)",
            )


def _set_of(ids: object) -> set[int] | None:
    """set(ids), as the course's `set(second.page_ids) == {0, 1}` reads it; None where that fails."""
    try:
        return set(ids)  # type: ignore[call-overload]
    except Exception:  # noqa: BLE001 - ids the course's set() cannot take fail its assert
        return None


def _expect_the_courses_reuse(pool_type: type, cache_type: type, rng: np.random.Generator) -> None:
    """The course's reuse test on hidden tokens, in its order and read as its asserts read them: a request of 6
    tokens through update_and_fetch in pages of 4 holds the list [0, 1], 2 issued and none free; after its release
    its offset is 0 with both pages free; a second request of 5 tokens through update_and_fetch, on a new cache,
    returns offset 5 and those 5 tokens, and holds the pages {0, 1}, 2 issued and none free."""
    pool = pool_type(4)
    first, second = cache_type(pool), cache_type(pool)
    first.update_and_fetch(*WrittenKv(2, COURSE_HEAD_DIM, "float32").make_chunk(rng, 6))
    step = "a request of 6 tokens through update_and_fetch (page_size=4)"
    expect(equals_list(first.page_ids, [0, 1]), INVARIANT,
           f"{step}: page_ids is {first.page_ids!r}, expected the list [0, 1]")  # fmt: skip
    expect(
        pool.num_pages == 2 and pool.num_free_pages == 0, INVARIANT,
        f"{step}: the pool has {pool.num_free_pages} of {pool.num_pages} pages free, expected 0 of 2",
    )
    first.release()
    step = f"{step}, then its release"
    expect(first.offset == 0, INVARIANT, f"{step}: the released cache's offset is {first.offset}")
    expect(
        pool.num_pages == 2 and pool.num_free_pages == 2, INVARIANT,
        f"{step}: the pool has {pool.num_free_pages} of {pool.num_pages} pages free, expected 2 of 2",
    )
    record = WrittenKv(2, COURSE_HEAD_DIM, "float32")
    chunk = record.make_chunk(rng, 5)
    keys, values, offset, _ = second.update_and_fetch(*chunk)
    record.read_back(chunk)  # the course compares with the arrays it appended, read after the call
    expect_arrays(INVARIANT, "update_and_fetch of 5 tokens", keys, values)
    step = f"{step}, then a request of 5 tokens through update_and_fetch on a new cache"
    expect(int(offset) == 5, INVARIANT, f"{step}: update_and_fetch returned offset {offset}, expected 5")
    expect(
        pool.num_pages == 2 and pool.num_free_pages == 0 and _set_of(second.page_ids) == {0, 1}, INVARIANT,
        f"{step}: it holds pages {second.page_ids!r}, the pool issued {pool.num_pages} with {pool.num_free_pages} "
        "free; expected the freed pages {0, 1} reused and no new id",
    )
    keys, values = to_numpy(keys, np.float64), to_numpy(values, np.float64)
    expect(
        keys.shape == values.shape == (1, *record.keys.shape) and same_tokens(keys[0], record.keys)
        and same_tokens(values[0], record.values), INVARIANT,
        f"{step}: update_and_fetch returned keys {keys.shape} and values {values.shape} that differ from the 5 "
        "tokens written",
    )


@split_at_the_course(f"{DAY_3}::test_task_1_paged_pool_reuses_freed_pages",
                     Geometry(page_sizes=(1, 4), kv_heads=(2,), head_dim=HEAD_DIM), per_page_size=True)
def test_released_pages_are_reused_before_new_ones(
    pool_type: type, cache_type: type, geometry: Geometry, page_size: int, rng: np.random.Generator
) -> None:
    # The course's case is its own reuse test (_expect_the_courses_reuse): both requests through update_and_fetch,
    # the only append it makes after a release. Beyond the course: the same through update_and_fetch_paged, a
    # request of two pages, then one of a page and a token.
    if geometry.course:
        _expect_the_courses_reuse(pool_type, cache_type, rng)
        return
    head_dim = geometry.head_dim
    pool = pool_type(page_size)
    first, second = cache_type(pool), cache_type(pool)
    first.update_and_fetch_paged(*WrittenKv(2, head_dim, "float32").make_chunk(rng, 2 * page_size))
    held = {int(p) for p in first.page_ids}
    issued = pool.num_pages
    first.release()
    step = f"after releasing a request of {2 * page_size} tokens on pages {sorted(held)} (page_size={page_size})"
    expect(first.offset == 0, INVARIANT, f"{step}: the released cache's offset is {first.offset}")
    expect(
        pool.num_pages == issued and pool.num_free_pages == issued, INVARIANT,
        f"{step}: {pool.num_free_pages} of {pool.num_pages} pages free, expected all {issued}",
    )
    second.update_and_fetch_paged(*WrittenKv(2, head_dim, "float32").make_chunk(rng, page_size + 1))
    step = f"{step}, then a request of {page_size + 1} tokens"
    taken = {int(p) for p in second.page_ids}
    expect(
        pool.num_pages == issued and pool.num_free_pages == 0 and taken == held, INVARIANT,
        f"{step}: it holds pages {sorted(taken)}, the pool issued {pool.num_pages} with {pool.num_free_pages} free; "
        f"expected the freed pages {sorted(held)} reused and no new id",
    )
