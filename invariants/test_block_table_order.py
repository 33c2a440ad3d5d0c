"""block_table_order: the block table is read in order, and only its order gives logical order.

Gathering a cache through its block table reproduces the tokens in the order
they were written, with requests interleaved on one pool so their pages are
not contiguous. A causal prefill sees its keys in logical order, so
reordering complete pages must change its output; a one-token decode without
a mask sees a set of keys, so reordering complete pages must not; renaming
physical pages consistently in the pages and the table must not either.
update_and_fetch returns the same tokens dense, and every page is a whole
page. A block table read again after the page ids change, at the same page
count (a release and a new append, a rewind and an append, another request
taking a freed page), lists the new ids.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagecheck.invariants.calls import (
    append_for_a_check, attention_output, attention_over_metadata, cache_length, current_metadata, metadata_layout,
    own_block_table, result_identity,
)
from pagecheck.invariants.course import (
    COURSE_FIRST_PAGED_APPEND, COURSE_HEAD_DIM, COURSE_MAX_PAGES, DAY_3, Geometry, attends_alone, split_at_the_course,
)
from pagecheck.invariants.strategies import SMALL_PAGE_SIZES, chunk_plans, paged_layouts, seeds
from pagecheck.invariants.subject import Subject
from pagecheck.invariants.verdict import (
    expect, expect_arrays, expect_close, expect_gathered_tokens, expect_pages_hold, same_tokens,
)
from pagecheck.invariants.workload import WrittenKv
from pagecheck.reference.arrays import to_numpy
from pagecheck.reference.attention import gather_dense
from pagecheck.reference.layouts import PagedLayout, random_layout
from pagecheck.reference.tolerance import compare

INVARIANT = "block_table_order"
pytestmark = pytest.mark.invariant(INVARIANT)

HEAD_DIM = 32


@split_at_the_course(f"{DAY_3}::test_task_1_paged_cache_matches_full_cache",
                     Geometry(page_sizes=SMALL_PAGE_SIZES, kv_heads=(2,), head_dim=HEAD_DIM))
@given(requests=st.integers(2, 3), seed=seeds(), data=st.data())
def test_gather_reproduces_tokens_in_logical_order(
    pool_type: type, cache_type: type, geometry: Geometry, requests: int, seed: int, data: st.DataObject
) -> None:
    page_size = data.draw(st.sampled_from(geometry.page_sizes), label="page_size")
    # The course's sizes in its case: two requests on a pool (as its reuse test), each of COURSE_MAX_PAGES at most.
    most = COURSE_MAX_PAGES * page_size if geometry.course else None
    requests = 2 if geometry.course else requests
    rng = np.random.default_rng(seed)
    pool = pool_type(page_size)
    caches = [cache_type(pool) for _ in range(requests)]
    records = [WrittenKv(2, geometry.head_dim, "float32") for _ in range(requests)]
    first = COURSE_FIRST_PAGED_APPEND if geometry.course else 1  # a course case opens a cache as the course does
    plans = [data.draw(chunk_plans(page_size=page_size, max_decode=3, max_total=most, min_first=first),
                       label=f"request {r}") for r in range(requests)]  # fmt: skip
    # Round-robin appends interleave the requests' pages in the pool.
    for step in range(max(len(p) for p in plans)):
        for cache, record, plan in zip(caches, records, plans):
            if step < len(plan):
                cache.update_and_fetch_paged(*record.make_chunk(rng, plan[step]))
    for r, (cache, record) in enumerate(zip(caches, records)):
        pages = [int(p) for p in cache.page_ids]
        where = f"request {r} of {requests} (page_size={page_size}, {record.length} tokens, pages {pages})"
        keys, values = (to_numpy(x, np.float64) for x in cache.gather_dense())
        expect(
            same_tokens(keys[0], record.keys) and same_tokens(values[0], record.values),
            INVARIANT, f"{where}: gather_dense() differs from the tokens written, in order",
        )
        if geometry.course:
            # The course reads a cache's pages through gather_dense() and its metadata only: how the pool's own
            # arrays and block_table() lay them out is beyond it.
            continue
        table_keys, table_values = gather_dense(
            pool.key_pages, pool.value_pages, own_block_table(cache), [cache_length(cache)], page_size
        )
        expect(
            np.array_equal(table_keys[0], record.keys) and np.array_equal(table_values[0], record.values),
            INVARIANT, f"{where}: the pool's pages read through block_table() differ from the tokens written",
        )


def _reorder_complete_pages(layout: PagedLayout, row: int, order: np.ndarray) -> PagedLayout:
    table = layout.block_table.copy()
    table[row, : len(order)] = layout.block_table[row, order]
    return layout.with_block_table(table)


@pytest.mark.beyond_course
@pytest.mark.parametrize("page_size", [1, 3, 8])
def test_causal_prefill_follows_page_order(paged_attention: object, page_size: int, rng: np.random.Generator) -> None:
    # A whole-context prefill: query row l sees exactly tokens 0..l, so moving any page moves what it sees.
    complete = 3
    context = complete * page_size + 1
    layout = random_layout(
        rng, context_lens=[context], page_size=page_size, num_queries=context, mask="causal", spare_pages=1
    )
    want = layout.reference_output()
    expect_close(INVARIANT, "causal prefill in the true page order", attention_output(paged_attention, layout), want, layout)

    reordered = _reorder_complete_pages(layout, 0, np.roll(np.arange(complete), 1))
    got = attention_output(paged_attention, reordered)
    expect(
        not compare(got, want, layout.dtype).passed, INVARIANT,
        "causal prefill output did not change when complete pages were reordered: the table order is ignored",
        reordered,
    )
    expect_close(INVARIANT, "causal prefill with complete pages reordered", got, reordered.reference_output(), reordered)


@pytest.mark.beyond_course
@given(layout=paged_layouts(complete_pages=True, kv_heads=(1, 2)), seed=seeds())
def test_decode_over_complete_pages_ignores_their_order(paged_attention: object, layout: PagedLayout, seed: int) -> None:
    rng = np.random.default_rng(seed)
    reordered = layout
    for row, context in enumerate(layout.context_lens):
        reordered = _reorder_complete_pages(reordered, row, rng.permutation(int(context) // layout.page_size))
    expect_close(
        INVARIANT, "one-token decode (mask None) with each row's complete pages permuted vs the original reference",
        attention_output(paged_attention, reordered), layout.reference_output(), reordered,
    )


@pytest.mark.beyond_course
@given(layout=paged_layouts(num_queries=(1, 4), masks=(None, "causal")), seed=seeds())
def test_renaming_pages_consistently_changes_nothing(paged_attention: object, layout: PagedLayout, seed: int) -> None:
    rename = np.random.default_rng(seed).permutation(layout.key_pages.shape[0])
    keys, values = np.empty_like(layout.key_pages), np.empty_like(layout.value_pages)
    keys[rename], values[rename] = layout.key_pages, layout.value_pages
    table = np.where(layout.block_table >= 0, rename[np.maximum(layout.block_table, 0)], -1)
    renamed = replace(layout, key_pages=keys, value_pages=values, block_table=table.astype(np.int32))
    expect_close(
        INVARIANT, "pages renamed consistently in the pool and the table vs the original reference",
        attention_output(paged_attention, renamed), layout.reference_output(), renamed,
    )


@split_at_the_course(f"{DAY_3}::test_task_1_paged_cache_matches_full_cache",
                     Geometry(page_sizes=(3, 4), kv_heads=(2,), head_dim=HEAD_DIM), per_page_size=True)
def test_update_and_fetch_returns_the_tokens_in_order(
    pool_type: type, cache_type: type, geometry: Geometry, page_size: int, rng: np.random.Generator
) -> None:
    head_dim = geometry.head_dim
    pool = pool_type(page_size)
    cache = cache_type(pool)
    record = WrittenKv(2, head_dim, "float32")
    for length in (3, 2, 5):
        chunk = record.make_chunk(rng, length)
        keys, values, offset, _ = cache.update_and_fetch(*chunk)
        if geometry.course:  # the course compares with the arrays it appended, read after the call
            record.read_back(chunk)
            expect_arrays(INVARIANT, f"update_and_fetch of {length} token(s)", keys, values)
        step = f"update_and_fetch of {length} token(s), {record.length} written in all (page_size={page_size})"
        expect(int(offset) == record.length, INVARIANT, f"{step}: returned offset {offset}")
        keys, values = to_numpy(keys, np.float64), to_numpy(values, np.float64)
        expect(
            keys.shape == (1, *record.keys.shape) and same_tokens(keys[0], record.keys)
            and same_tokens(values[0], record.values), INVARIANT,
            f"{step}: the returned keys {keys.shape} and values differ from the tokens written, in order",
        )
        lens = [int(n) for n in cache.page_lens]
        expect(sum(lens) == record.length, INVARIANT, f"{step}: page_lens {lens} do not sum to {record.length}")
        pages = -(-record.length // page_size)
        expect(cache.num_pages == pages, INVARIANT, f"{step}: {cache.num_pages} pages, expected {pages}")
        if geometry.course:
            # As the course reads pages: each one's capacity (read_page(id)[0].shape[2]), not what it holds.
            capacity = [int(pool.read_page(page_id)[0].shape[2]) for page_id in cache.page_ids]
            expect(capacity == [page_size] * pages, INVARIANT,
                   f"{step}: read_page() gives pages of {capacity} slots, expected {[page_size] * pages}")  # fmt: skip
        elif callable(getattr(pool, "read_page", None)):
            start = 0
            for page_id, used in zip(cache.page_ids, lens):
                page_keys, page_values = (to_numpy(x, np.float64) for x in pool.read_page(int(page_id)))
                expect(
                    page_keys.shape == (1, 2, page_size, head_dim), INVARIANT,
                    f"{step}: read_page({int(page_id)}) gave keys {page_keys.shape}, expected a whole page "
                    f"{(1, 2, page_size, head_dim)}",
                )
                expect(
                    np.array_equal(page_keys[0, :, :used], record.keys[:, start : start + used])
                    and np.array_equal(page_values[0, :, :used], record.values[:, start : start + used]),
                    INVARIANT, f"{step}: read_page({int(page_id)}) differs from tokens {start}..{start + used - 1}",
                )
                start += used


def _expect_the_courses_table_reuse(
    subject: Subject, pool_type: type, cache_type: type, rng: np.random.Generator
) -> None:
    """The course's sequence on a cache of its own: 3 tokens in pages of 4, then block_table() twice gives one
    object; after a token that fills the tail page, still that object; after one that opens a page, another. Asked
    where the cache lives (calls.result_identity): identity does not cross a sandbox's pipe."""
    cache = cache_type(pool_type(4))
    written = WrittenKv(2, COURSE_HEAD_DIM, "float32")
    cache.update_and_fetch_paged(*written.make_chunk(rng, 3))
    probe = result_identity(subject, cache, "block_table")
    expect(bool(probe.same()), INVARIANT, "3 tokens in pages of 4: block_table() called twice gave two objects")
    cache.update_and_fetch_paged(*written.make_chunk(rng, 1))
    expect(bool(probe.same()), INVARIANT,
           "a token that filled the tail page (the page ids unchanged): block_table() gave a new object")  # fmt: skip
    cache.update_and_fetch_paged(*written.make_chunk(rng, 1))
    expect(not probe.same(), INVARIANT,
           "a token on a new page (the page ids changed): block_table() gave the same object as before")  # fmt: skip


@split_at_the_course(f"{DAY_3}::test_task_1_reuses_block_table_until_page_ids_change",
                     Geometry(page_sizes=(2, 3), kv_heads=(2,), head_dim=HEAD_DIM), per_page_size=True)
def test_block_table_is_read_again_when_page_ids_change(
    subject: Subject, pool_type: type, cache_type: type, paged_attention: object, geometry: Geometry,
    page_size: int, rng: np.random.Generator, advise: Callable[[str], None],
) -> None:
    if geometry.course:
        _expect_the_courses_table_reuse(subject, pool_type, cache_type, rng)
    pool = pool_type(page_size)
    cache, other = cache_type(pool), cache_type(pool)
    head_dim = geometry.head_dim
    records = {"cache": WrittenKv(2, head_dim, "float32"), "other": WrittenKv(2, head_dim, "float32")}
    caches = {"cache": cache, "other": other}
    latest: dict[str, Any] = {}  # each cache's metadata from its last append
    query = records["cache"].make_query(rng, 4, 1)
    mask = "causal" if geometry.course else None

    def append(name: str, length: int) -> None:
        # A course case's last token with mask "causal", whose metadata's own mask the attention gets.
        latest[name] = append_for_a_check(caches[name], *records[name].make_chunk(rng, length), geometry.course)
        if geometry.course:
            # Attended right away, as the course attends over a metadata before anything else is appended to its
            # pool: a metadata may hold only until the pool's next append (a staging buffer reused per append).
            check_one(name, f"after appending {length} to {name}")

    def check(step: str) -> None:
        # Beyond the course, each cache's table now. A course case checked each cache right after its append
        # (append); here it reads each cache's tokens through gather_dense(), as the course reads them, so a write
        # of the other request into its pages shows.
        for name, owner in caches.items():
            if not geometry.course:
                check_one(name, step)
                continue
            expect_gathered_tokens(INVARIANT, f"{step}: {name} (page_size={page_size})", owner, records[name])

    def check_one(name: str, step: str) -> None:
        owner = caches[name]
        where = f"{step}: {name} (page_size={page_size})"
        # The course attends over the metadata an append returns; a cache's own block_table() (any width of
        # -1 padding) with the pool's arrays is beyond it.
        metadata = latest[name] if geometry.course else current_metadata(pool, owner, page_size)
        what = "the metadata's block_table" if geometry.course else "block_table()"
        row = [int(p) for p in to_numpy(metadata.block_table).reshape(-1)]
        pages = [int(p) for p in owner.page_ids]
        # The course pins the ids of a metadata's table only where they are the pool's first (its prefill's
        # [[0, 1]]): a metadata may carry pages of its own, numbered its own way, so long as they hold the
        # request's tokens (read below through that table). block_table() lists the cache's page ids.
        same_ids = geometry.course or row[: len(pages)] == pages
        expect(
            same_ids and all(p == -1 for p in row[len(pages) :]), INVARIANT,
            f"{where}: {what} is {row}, the page ids are {pages} (then only -1 padding)",
        )
        layout = metadata_layout(query, metadata, "float32", mask, page_size)
        expect_pages_hold(INVARIANT, f"{where}: the metadata", layout, {0: records[name]})
        if not attends_alone(geometry.course, query.shape[2], records[name].length):
            return  # a course case's float32 decode of one request: the course decodes float32 only in a batch
        expect_close(
            INVARIANT, f"{where}: decode attention over {what}",
            attention_over_metadata(paged_attention, query, metadata, mask, own_mask=geometry.course),
            records[name].attention(query, mask), layout,
        )

    append("cache", 2 * page_size - 1)
    # A course case opens a cache as the course does: a prefix of COURSE_FIRST_PAGED_APPEND tokens at least, then the
    # last token on its own.
    append("other", COURSE_FIRST_PAGED_APPEND + 1 if geometry.course else 1)
    first = cache.block_table()
    check("two pages, the tail not full")
    append("cache", 1)
    if not geometry.course and cache.block_table() is not first:
        advise("block_table() built a new table after an append that kept the page ids; the course's "
               "test_task_1_reuses_block_table_until_page_ids_change expects the same array back")
    check("the tail page filled")

    cache.release()
    records["cache"] = WrittenKv(2, head_dim, "float32")
    if geometry.course:  # the course starts each request on a cache of its own
        cache = caches["cache"] = cache_type(pool)
    append("other", page_size)  # fills its tail, then takes a page the release freed
    append("cache", 2 * page_size)
    check("released, another request took a freed page, appended to two pages again")

    # Beyond the course: it appends nothing after a rewind, and never rewinds more than a page.
    if geometry.course or not callable(getattr(cache, "rewind", None)):
        return
    cache.rewind(page_size + 1)  # back inside its first page: the second page is freed
    records["cache"].truncate(page_size - 1)
    append("other", page_size)  # takes the page the rewind freed
    append("cache", page_size + 1)
    check("rewound into the first page, another request took the freed page, appended to two pages again")
