"""release_once: releasing a request returns every page of every layer to its pool, exactly once.

A request holds one cache per layer, each layer with its own pool; a second
request shares those pools so a release that frees too much shows. After the
release each pool's free list holds exactly the released pages, no id twice;
once every request is released the free count equals the pages issued, and
a request needing every freed page takes exactly those pages and no new id
(the free list is the pool's own word; what the next request gets is not).
Freeing any page again raises ValueError saying it is "already free".
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagecheck.invariants.calls import course_dense_append, course_rewind, equals_list, pool_state, same_pool_state
from pagecheck.invariants.course import COURSE_FIRST_PAGED_APPEND, COURSE_HEAD_DIM, DAY_3, Geometry, split_at_the_course
from pagecheck.invariants.strategies import chunk_plans, seeds
from pagecheck.invariants.verdict import expect, expect_value_error
from pagecheck.invariants.workload import WrittenKv

INVARIANT = "release_once"
pytestmark = pytest.mark.invariant(INVARIANT)

HEAD_DIM = 32
NUM_KV_HEADS = 2


class Request:
    """One cache per layer; layer l lives in pools[l]."""

    def __init__(self, cache_type: type, pools: list[object], head_dim: int = HEAD_DIM) -> None:
        self.caches = [cache_type(pool) for pool in pools]
        self.records = [WrittenKv(NUM_KV_HEADS, head_dim, "float32") for _ in pools]

    def append(self, rng: np.random.Generator, length: int, method: str = "update_and_fetch_paged") -> None:
        for cache, record in zip(self.caches, self.records):
            getattr(cache, method)(*record.make_chunk(rng, length))

    def append_dense(self, rng: np.random.Generator, length: int, page_size: int) -> None:
        """Through update_and_fetch, in the pieces the course's calls there open pages in (course_dense_append)."""
        for cache, record in zip(self.caches, self.records):
            course_dense_append(cache, *record.make_chunk(rng, length), page_size)

    def pages(self) -> list[set[int]]:
        return [{int(p) for p in cache.page_ids} for cache in self.caches]

    def release(self) -> None:
        for cache in self.caches:
            cache.release()


def _check_free_lists(
    pools: list[object], expected: list[set[int]], step: str, course: bool = False, live: list[set[int]] | None = None
) -> None:
    """Each pool counts its free pages as `expected`; beyond the course, its free_page_ids lists exactly those
    (the course reads that list only as a before/after snapshot, so a course case counts, and counts a page a released
    request had taken ahead for its next decode as free too: at least the `expected` pages, at most all the pages
    not `live`, held by a request still live)."""
    for layer, (pool, want) in enumerate(zip(pools, expected)):
        if course:
            most = pool.num_pages - len(live[layer]) if live else pool.num_pages
            expect(
                len(want) <= pool.num_free_pages <= most, INVARIANT,
                f"{step}: layer {layer} num_free_pages={pool.num_free_pages}, expected {len(want)} (at most {most})",
            )
            continue
        free = [int(p) for p in pool.free_page_ids]
        expect(len(free) == len(set(free)), INVARIANT, f"{step}: layer {layer} lists a page free twice: {sorted(free)}")
        expect(
            set(free) == want, INVARIANT,
            f"{step}: layer {layer} free pages {sorted(free)}, expected exactly {sorted(want)}",
        )
        expect(
            pool.num_free_pages == len(want), INVARIANT,
            f"{step}: layer {layer} num_free_pages={pool.num_free_pages}, expected {len(want)}",
        )


def _taking_turns(
    cache_type: type, pools: list[Any], page_size: int, seed: int, data: st.DataObject, names: tuple[str, ...],
    head_dim: int = HEAD_DIM, max_total: int | None = None, min_first: int = 1,
) -> list[Request]:
    """One Request per name over every layer's pool, each given a drawn chunk plan (labelled by its name, at most
    `max_total` tokens, `min_first` at least in its first chunk), the requests appending their chunks in turn."""
    rng = np.random.default_rng(seed)
    requests = [Request(cache_type, pools, head_dim) for _ in names]
    plans = [data.draw(chunk_plans(page_size=page_size, max_total=max_total, min_first=min_first), label=name)
             for name in names]  # fmt: skip
    for step in range(max(map(len, plans))):
        for request, plan in zip(requests, plans):
            if step < len(plan):
                request.append(rng, plan[step])
    return requests


@split_at_the_course(f"{DAY_3}::test_task_1_paged_pool_reuses_freed_pages",
                     Geometry(page_sizes=(1, 2, 3, 8), kv_heads=(NUM_KV_HEADS,), head_dim=HEAD_DIM))
@given(layers=st.integers(1, 4), seed=seeds(), data=st.data())
def test_release_returns_every_page_of_every_layer_once(
    pool_type: type, cache_type: type, geometry: Geometry, layers: int, seed: int, data: st.DataObject
) -> None:
    page_size = data.draw(st.sampled_from(geometry.page_sizes), label="page_size")
    pools = [pool_type(page_size) for _ in range(layers)]
    # The course's requests hold 2 pages (its 6 tokens in pages of 4), and the request that takes the freed pages
    # back all of them: so do the course case's, a request never past the course's largest (5 pages), each opened as
    # the course opens a cache.
    leaving, staying = _taking_turns(
        cache_type, pools, page_size, seed, data, ("leaving", "staying"), geometry.head_dim,
        2 * page_size if geometry.course else None, COURSE_FIRST_PAGED_APPEND if geometry.course else 1,
    )

    held = leaving.pages()
    if geometry.course:  # the course compares page_ids with a list: `first.page_ids == [0, 1]`
        for layer, cache in enumerate(leaving.caches):
            ids = [int(p) for p in cache.page_ids]
            expect(equals_list(cache.page_ids, ids), INVARIANT,
                   f"layer {layer}: page_ids {cache.page_ids!r} does not compare equal to the list {ids}")  # fmt: skip
    leaving.release()
    for layer, cache in enumerate(leaving.caches):
        if geometry.course:  # after a release the course reads the cache's offset only
            expect(cache.offset == 0, INVARIANT, f"layer {layer}: offset {cache.offset} after release")
            continue
        expect(
            cache.num_pages == 0 and len(cache.page_ids) == 0, INVARIANT,
            f"layer {layer} still holds pages {list(cache.page_ids)} after release",
        )
    held_by_staying = staying.pages()
    _check_free_lists(pools, held, f"after releasing a request holding {[sorted(h) for h in held]}", geometry.course,
                      held_by_staying)  # fmt: skip

    staying.release()
    everything = [a | b for a, b in zip(held, held_by_staying)]
    _check_free_lists(pools, everything, "after releasing both requests", geometry.course)
    for layer, pool in enumerate(pools):
        expect(
            pool.num_free_pages == pool.num_pages, INVARIANT,
            f"layer {layer}: {pool.num_free_pages} pages free of {pool.num_pages} issued, with no request live",
        )

    # The free lists above are the pools' own word; what a release returned is what the next request gets. As in
    # the course's test, a request needing every freed page takes exactly those pages and no new id. The course's
    # case appends it as the course does, through update_and_fetch (the course never appends through
    # update_and_fetch_paged after a release), in pieces that open pages as the course's calls there do (two pages
    # at most, then one: calls.course_dense_append); beyond the course, in one update_and_fetch_paged.
    # The course compares a pool's counts with ints (==) only, so a count may come as any number equal to one (a
    # float, a NumPy or MLX scalar): the request's length is made from it as an int.
    issued = [int(pool.num_pages) for pool in pools]
    if max(issued) == 0:
        return
    rng = np.random.default_rng(seed + 1)
    method = "update_and_fetch" if geometry.course else "update_and_fetch_paged"
    for layer, (pool, freed) in enumerate(zip(pools, everything)):
        taker = Request(cache_type, [pool], geometry.head_dim)
        if geometry.course:
            taker.append_dense(rng, issued[layer] * page_size, page_size)
        else:
            taker.append(rng, issued[layer] * page_size, method)
        taken = taker.pages()[0]
        # In the course's case the taker may also take a page a released request had taken ahead (counted free).
        reused = taken >= freed if geometry.course else taken == freed
        expect(
            reused and pool.num_pages == issued[layer] and pool.num_free_pages == 0, INVARIANT,
            f"layer {layer}: after every release, a request of {issued[layer] * page_size} tokens through "
            f"{method} (page_size={page_size}) holds pages {sorted(taken)}, the pool issued {pool.num_pages} with "
            f"{pool.num_free_pages} free; expected the freed pages {sorted(freed)} reused and no new id",
        )


# The course never frees a page twice: how a second free fails (ValueError, "already free") is beyond it.
@pytest.mark.beyond_course
@given(page_size=st.sampled_from((1, 2, 3, 8)), layers=st.integers(1, 4), seed=seeds(), data=st.data())
def test_second_free_of_a_released_page_says_already_free(
    pool_type: type, cache_type: type, page_size: int, layers: int, seed: int, data: st.DataObject
) -> None:
    pools = [pool_type(page_size) for _ in range(layers)]
    requests = _taking_turns(cache_type, pools, page_size, seed, data, ("request 0", "request 1"))
    held = [request.pages() for request in requests]
    for request in requests:
        request.release()
    everything = [a | b for a, b in zip(*held)]
    for layer, (pool, pages) in enumerate(zip(pools, everything)):
        for page in sorted(pages):
            before = pool_state(pool)
            expect_value_error(
                INVARIANT, f"layer {layer}: freeing page {page} a second time", lambda: pool.free_page(page), "already free"
            )
            expect(
                same_pool_state(before, pool_state(pool)), INVARIANT,
                f"layer {layer}: the rejected second free of page {page} changed the pool",
            )


@split_at_the_course(f"{DAY_3}::test_task_1_paged_cache_rewind",
                     Geometry(page_sizes=(2, 5), kv_heads=(NUM_KV_HEADS,), head_dim=HEAD_DIM), per_page_size=True)
def test_rewind_then_release_returns_every_page(
    pool_type: type, cache_type: type, geometry: Geometry, page_size: int, rng: np.random.Generator,
) -> None:
    # The course's case is its own rewind (calls.course_rewind: rewind(3) of [4, 4, 1], then gather_dense(), as
    # the course calls it before it counts), then a release; beyond the course, from 3 pages and a token, rewinds
    # of more than a page, into a page and to a page boundary.
    if geometry.course:
        written = WrittenKv(NUM_KV_HEADS, COURSE_HEAD_DIM, "float32")
        pool, cache, _, _ = course_rewind(pool_type, cache_type, written, rng)
        step = "after the course's rewind(3) of [4, 4, 1] and gather_dense()"
        expect(
            pool.num_pages == 3 and pool.num_free_pages == 1, INVARIANT,
            f"{step}: the pool has {pool.num_free_pages} of {pool.num_pages} pages free, expected 1 of 3",
        )
        cache.release()
        expect(
            pool.num_free_pages == 3, INVARIANT,
            f"{step} and a release: the pool has {pool.num_free_pages} of {pool.num_pages} pages free, expected 3",
        )
        return
    total = 3 * page_size + 1
    for remaining in (2 * page_size - 1, 2 * page_size):
        pools = [pool_type(page_size) for _ in range(2)]
        request = Request(cache_type, pools, geometry.head_dim)
        if not hasattr(request.caches[0], "rewind"):
            pytest.skip("the subject's TinyKvPagedCache has no rewind")
        request.append(rng, total)
        for cache in request.caches:
            cache.rewind(total - remaining)
        for layer, cache in enumerate(request.caches):
            expect(
                cache.num_pages == -(-remaining // page_size), INVARIANT,
                f"layer {layer}: {cache.num_pages} pages after rewinding to {remaining} tokens (page_size={page_size})",
            )
        request.release()
        for layer, pool in enumerate(pools):
            free = [int(p) for p in pool.free_page_ids]
            expect(
                sorted(free) == list(range(pool.num_pages)), INVARIANT,
                f"layer {layer}: free pages {sorted(free)} after rewinding to {remaining} tokens and release, "
                f"{pool.num_pages} issued",
            )
