"""page_storage: a pool's page storage grows geometrically and counts it, materialize() reads no dense K/V, reset() empties it.

The course's pool keeps one key and one value store with room for
`capacity` pages: the course pins one case (17 tokens in pages of 4 leave
room for 8 pages after 2 growths that copied 4). Beyond it, the first write
creates room for INITIAL_CAPACITY pages (or every page issued so far, if
more) at every page size, and a page that does not fit doubles it, copying
the pages already there; storage_nbytes counts that room. Each creation or growth counts in
storage_growths, each growth adds the pages and bytes it copied, and
key_pages / value_pages show one row per issued page. materialize()
evaluates that storage in one mx.eval call and never gathers the request's
tokens; reset() of a pool with no live page drops storage, ids and counters.
A pool without these counters skips the checks that read them.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

from pagecheck.invariants.course import COURSE_HEAD_DIM, DAY_3, DAY_4, Geometry, split_at_the_course
from pagecheck.invariants.calls import watch_materialize
from pagecheck.invariants.subject import Subject
from pagecheck.invariants.verdict import expect, same_tokens
from pagecheck.invariants.workload import WrittenKv
from pagecheck.reference.arrays import to_numpy

INVARIANT = "page_storage"
pytestmark = pytest.mark.invariant(INVARIANT)

HEAD_DIM = 32
NUM_KV_HEADS = 2
INITIAL_CAPACITY = 4  # the course's: 17 tokens in pages of 4 leave capacity 8 after 2 growths
GROWTH_COUNTERS = ("capacity", "storage_growths", "copied_pages_on_growth", "copied_bytes_on_growth")


def _require(pool: Any, names: tuple[str, ...]) -> None:
    missing = [name for name in names if not hasattr(pool, name)]
    if missing:
        pytest.skip(f"the subject's TinyKvPagedPool has no {', '.join(missing)}")


def _counters(pool: Any) -> dict[str, int]:
    return {name: int(getattr(pool, name)) for name in GROWTH_COUNTERS}


def _page_bytes(pool: Any) -> int:
    """Bytes of one page of keys and values together, in the pool's own storage."""
    return (pool.key_pages.nbytes + pool.value_pages.nbytes) // pool.num_pages


@pytest.mark.replays_the_course
@pytest.mark.course(
    f"{DAY_3}::test_task_1_paged_pool_grows_storage_geometrically",
    f"{DAY_4}::test_task_1_paged_attention_matches_dense_attention",
)
def test_the_courses_append_of_17_tokens_grows_storage_twice(
    pool_type: type, cache_type: type, rng: np.random.Generator
) -> None:
    # The course's one data point: 17 tokens in pages of 4, in one append, leave 5 pages issued in room for 8,
    # after 2 growths that copied 4 pages. Where the first storage starts and how it grows at other sizes is
    # the check beyond the course below.
    pool = pool_type(4)
    _require(pool, GROWTH_COUNTERS)
    cache_type(pool).update_and_fetch_paged(*WrittenKv(NUM_KV_HEADS, COURSE_HEAD_DIM, "float32").make_chunk(rng, 17))
    rows = (int(pool.key_pages.shape[0]), int(pool.value_pages.shape[0]))
    step = "after one append of 17 tokens (page_size=4)"
    expect(rows == (pool.num_pages,) * 2 == (5, 5), INVARIANT, f"{step}: key/value_pages have {rows} rows, "
           f"{pool.num_pages} issued, expected 5")  # fmt: skip
    # The course's 1024 bytes: 4 pages of float32 keys and values, 2 heads x 4 slots x head dim 4 each.
    page_bytes = 2 * NUM_KV_HEADS * 4 * COURSE_HEAD_DIM * 4
    want = {"capacity": 8, "storage_growths": 2, "copied_pages_on_growth": 4,
            "copied_bytes_on_growth": 4 * page_bytes}  # fmt: skip
    got = _counters(pool)
    expect(got == want, INVARIANT, f"{step}: counters {got}, expected {want}")


@pytest.mark.beyond_course
@pytest.mark.parametrize("page_size", [1, 4])
def test_storage_grows_geometrically_and_counts_its_copies(
    pool_type: type, cache_type: type, page_size: int, rng: np.random.Generator
) -> None:
    pool = pool_type(page_size)
    _require(pool, GROWTH_COUNTERS)
    cache = cache_type(pool)
    record = WrittenKv(NUM_KV_HEADS, HEAD_DIM, "float32")
    want = _counters(pool)
    expect(want == dict.fromkeys(GROWTH_COUNTERS, 0), INVARIANT, f"a new pool's counters are {want}, expected zeros")
    # One page per append, so at most one growth happens between two looks.
    for pages in range(1, 4 * INITIAL_CAPACITY + 2):
        cache.update_and_fetch_paged(*record.make_chunk(rng, page_size))
        step = f"after the append that took page {pages} (page_size={page_size})"
        rows = (int(pool.key_pages.shape[0]), int(pool.value_pages.shape[0]))
        expect(rows == (pool.num_pages,) * 2, INVARIANT, f"{step}: key/value_pages have {rows} rows, {pool.num_pages} issued")
        capacity = want["capacity"]
        if capacity == 0:
            want.update(capacity=max(INITIAL_CAPACITY, pool.num_pages), storage_growths=want["storage_growths"] + 1)
        elif pool.num_pages > capacity:
            want["copied_pages_on_growth"] += capacity
            want["copied_bytes_on_growth"] += capacity * _page_bytes(pool)
            want.update(capacity=2 * capacity, storage_growths=want["storage_growths"] + 1)
        got = _counters(pool)
        expect(got == want, INVARIANT, f"{step}: counters {got}, expected {want}")
        if hasattr(pool, "storage_nbytes"):
            expect(
                int(pool.storage_nbytes) == want["capacity"] * _page_bytes(pool), INVARIANT,
                f"{step}: storage_nbytes={pool.storage_nbytes} for {want['capacity']} pages of {_page_bytes(pool)} bytes",
            )


@pytest.mark.course(f"{DAY_3}::test_task_1_paged_pool_reset_removes_warmup_capacity_and_counters")
def test_reset_empties_an_idle_pool(pool_type: type, cache_type: type, rng: np.random.Generator) -> None:
    pool = pool_type(4)
    if not callable(getattr(pool, "reset", None)):
        pytest.skip("the subject's TinyKvPagedPool has no reset")
    _require(pool, GROWTH_COUNTERS)  # read on a fresh pool by the course's snapshot (_paged_state)
    cache = cache_type(pool)
    cache.update_and_fetch_paged(*WrittenKv(NUM_KV_HEADS, COURSE_HEAD_DIM, "float32").make_chunk(rng, 17))
    cache.release()
    # As the course's test reads it before the reset: the 17 tokens' 5 pages free, storage grown to 8 pages.
    idle = {"capacity": pool.capacity, "num_free_pages": pool.num_free_pages}
    expect(idle == {"capacity": 8, "num_free_pages": 5}, INVARIANT,
           f"17 tokens in pages of 4, then a release: {idle}, expected capacity 8 with 5 pages free")  # fmt: skip
    pool.reset()
    _require(pool, ("storage_nbytes",))  # the course reads it only here, after the reset
    got = {**_counters(pool), "num_pages": pool.num_pages, "num_free_pages": pool.num_free_pages,
           "storage_nbytes": int(pool.storage_nbytes)}  # fmt: skip
    expect(all(v == 0 for v in got.values()), INVARIANT, f"after release and reset: {got}, expected all zero")


# The course's reset test ends at the counters: a pool that refuses to serve after reset() passes it.
@pytest.mark.beyond_course
def test_a_reset_pool_serves_again_from_scratch(pool_type: type, cache_type: type, rng: np.random.Generator) -> None:
    pool = pool_type(4)
    if not callable(getattr(pool, "reset", None)):
        pytest.skip("the subject's TinyKvPagedPool has no reset")
    cache = cache_type(pool)
    cache.update_and_fetch_paged(*WrittenKv(NUM_KV_HEADS, COURSE_HEAD_DIM, "float32").make_chunk(rng, 17))
    cache.release()
    pool.reset()
    record = WrittenKv(NUM_KV_HEADS, COURSE_HEAD_DIM, "float32")
    again = cache_type(pool)
    again.update_and_fetch_paged(*record.make_chunk(rng, 5))
    keys, values = (to_numpy(x, np.float64)[0] for x in again.gather_dense())
    expect(
        [int(p) for p in again.page_ids] == [0, 1] and same_tokens(keys, record.keys)
        and same_tokens(values, record.values), INVARIANT,
        f"after reset, a request of 5 tokens holds pages {list(again.page_ids)} and reads back other tokens",
    )


@split_at_the_course(f"{DAY_3}::test_task_1_materializes_page_storage_without_dense_gather",
                     Geometry(page_sizes=(1, 4), kv_heads=(NUM_KV_HEADS,), head_dim=HEAD_DIM), per_page_size=True,
                     replay=True)  # fmt: skip
def test_materialize_evaluates_the_storage_without_a_dense_gather(
    pool_type: type, cache_type: type, geometry: Geometry, page_size: int, rng: np.random.Generator,
    subject: Subject, advise: Callable[[str], None],
) -> None:
    import mlx.core as mx

    pool = pool_type(page_size)
    cache = cache_type(pool)
    if not callable(getattr(cache, "materialize", None)):
        pytest.skip("the subject's TinyKvPagedCache has no materialize")
    record = WrittenKv(NUM_KV_HEADS, geometry.head_dim, "float32")
    cache.update_and_fetch_paged(*record.make_chunk(rng, 5))
    watched = watch_materialize(subject, cache)
    # The course's test fails where the refusal of gather_dense() leaves materialize(); one caught inside is advice.
    expect(not watched.get("escaped", watched["gathers"]), INVARIANT, "materialize() called gather_dense()")
    if watched["gathers"]:
        advise("materialize() called gather_dense() and carried on when it failed: it should not call it at all")
    # One mx.eval of the key and value pages (read from the pool the check made, as the course's test reads them):
    # the course's test requires that call whatever the pool keeps its pages in. Beyond the course, storage that
    # is not MLX arrays (the reference's NumPy pages) is real already and needs none.
    key_pages, value_pages = pool.key_pages, pool.value_pages
    if geometry.course or isinstance(key_pages, mx.array):
        want = [[list(key_pages.shape), list(value_pages.shape)]]
        expect(watched["evals"] == want, INVARIANT,
               f"materialize() called mx.eval on shapes {watched['evals']}, expected once on {want}")  # fmt: skip
    keys, values = (to_numpy(x, np.float64)[0] for x in cache.gather_dense())
    expect(
        same_tokens(keys, record.keys) and same_tokens(values, record.values), INVARIANT,
        "after materialize() the cache reads back other tokens",
    )
