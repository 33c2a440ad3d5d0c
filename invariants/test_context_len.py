"""context_len: the context length always equals the tokens written, and attention reads exactly that many.

Prefill chunks are drawn to end on, cross, and stay inside page boundaries;
decode then appends one token at a time. After every append the cache's
context_lens() and its metadata must count the tokens written, and the
subject's attention over that metadata must equal the float64 oracle over the
tokens written. Attention layouts leave NaN in every slot past each context,
so reading one slot too many shows as NaN, and the last written token is made
to dominate its row, so reading one slot too few shows too. A rewind to any
offset, page boundaries included, leaves exactly that many tokens, and the
appends after it count on from there.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagecheck.invariants.calls import (
    append_for_a_check, attention_as_the_course_calls, attention_output, attention_over_metadata, course_rewind,
    course_tolist, equals_list, metadata_layout, own_context_lens, read_once,
)
from pagecheck.invariants.course import (
    COURSE_FIRST_PAGED_APPEND, COURSE_HEAD_DIM, COURSE_MAX_PAGES, DAY_3, DAY_4, Geometry, attends_alone, query_len,
    split_at_the_course,
)
from pagecheck.invariants.strategies import SMALL_PAGE_SIZES, chunk_plans, paged_layouts, seeds
from pagecheck.invariants.verdict import (
    expect, expect_arrays, expect_close, expect_close_to_its_gather, expect_pages_hold, gathered, same_tokens,
)
from pagecheck.invariants.workload import WrittenKv
from pagecheck.reference.arrays import to_numpy
from pagecheck.reference.layouts import PagedLayout, random_layout

INVARIANT = "context_len"
pytestmark = pytest.mark.invariant(INVARIANT)

HEAD_DIM = 32


def _expect_own_context_lens(cache: object, tokens: int, geometry: Geometry, step: str) -> None:
    """The cache's own context_lens() counts `tokens`; beyond the course only (the course never calls it)."""
    if not geometry.course:
        counted = own_context_lens(cache)
        expect(counted == [tokens], INVARIANT, f"{step}: context_lens() is {counted}")


@split_at_the_course(f"{DAY_4}::test_task_1_paged_attention_matches_dense_attention",
                     Geometry(page_sizes=SMALL_PAGE_SIZES, kv_heads=(1, 2), head_dim=HEAD_DIM))
@given(seed=seeds(), data=st.data())
def test_context_lens_count_tokens_written(
    pool_type: type, cache_type: type, paged_attention: object, geometry: Geometry, seed: int, data: st.DataObject,
) -> None:
    page_size = data.draw(st.sampled_from(geometry.page_sizes), label="page_size")
    num_kv_heads = data.draw(st.sampled_from(geometry.kv_heads), label="num_kv_heads")
    most = COURSE_MAX_PAGES * page_size if geometry.course else None
    # A course case opens the cache as the course does, with a prefix of COURSE_FIRST_PAGED_APPEND tokens at least
    # before the first append's last token (which goes on its own, with mask "causal").
    first = COURSE_FIRST_PAGED_APPEND + 1 if geometry.course else 1
    plan = data.draw(chunk_plans(page_size=page_size, max_total=most, min_first=first), label="append lengths")
    rng = np.random.default_rng(seed)
    cache = cache_type(pool_type(page_size))
    written = WrittenKv(num_kv_heads, geometry.head_dim, "float32")
    for length in plan:
        rows = query_len(length, geometry, written.length + length)
        # A course case's last `rows` tokens with mask "causal", whose metadata's own mask the attention gets.
        metadata = append_for_a_check(cache, *written.make_chunk(rng, length), geometry.course, rows)
        step = f"after appending {length} token(s), {written.length} written in all (page_size={page_size})"
        _expect_own_context_lens(cache, written.length, geometry, step)
        in_metadata = to_numpy(metadata.context_lens).tolist()
        expect(in_metadata == [written.length], INVARIANT, f"{step}: metadata context_lens is {in_metadata}")
        if not geometry.course:
            # The course reads offset after update_and_fetch, rewind and release, and compares it before and after
            # a rejected append, but never after a paged append: there a cache may keep its length elsewhere.
            expect(cache.offset == written.length, INVARIANT, f"{step}: offset is {cache.offset}")

        mask = "causal" if length > 1 or geometry.course else None
        query = written.make_query(rng, 2 * num_kv_heads, rows)
        # The pages are read before the attention: the course reads only their shapes after it.
        layout = metadata_layout(query, metadata, "float32", mask, page_size)
        expect_pages_hold(INVARIANT, f"{step}: the metadata", layout, {0: written})
        if not attends_alone(geometry.course, rows, written.length):
            continue  # a course case's float32 decode of one request: the course decodes float32 only in a batch
        got = attention_over_metadata(paged_attention, query, metadata, mask, own_mask=geometry.course)
        expect_close(INVARIANT, f"{step}: attention over the cache", got, written.attention(query, mask), layout)


@pytest.mark.replays_the_course
@pytest.mark.course(f"{DAY_4}::test_task_1_paged_attention_matches_dense_attention")
def test_the_courses_prefill_after_an_append(
    pool_type: type, cache_type: type, paged_attention: object, rng: np.random.Generator
) -> None:
    """The course's own prefill, as it builds and reads it: 3 tokens appended, then 3 more with mask "causal";
    attention over the metadata with its own mask (a query of 3 rows) matches causal attention over the 6 tokens,
    and the metadata, read again after the attention, says pages [[0, 1]], context [6] and holds the pool's 2 pages
    of 4."""
    import mlx.core as mx

    cache = cache_type(pool_type(4))
    written = WrittenKv(2, COURSE_HEAD_DIM, "float32")
    cache.update_and_fetch(*written.make_chunk(rng, 3))
    handed = cache.update_and_fetch_paged(*written.make_chunk(rng, 3), mask="causal")
    metadata = read_once(handed)  # what the attention gets
    where = "3 tokens, then 3 more with mask 'causal' (the course's prefill)"
    query = written.make_query(rng, 4, 3)
    tokens = gathered(INVARIANT, cache)  # before the attention, as the course's test reads it
    out = attention_as_the_course_calls(paged_attention, mx.array(query.astype(np.float32)), metadata)
    expect_arrays(INVARIANT, f"{where}: paged_attention", out)  # the course's assert_allclose reads its dtype first
    got = to_numpy(out, np.float64)
    # The metadata's fields read again after the attention, as the course's asserts read them (a field that changed
    # in place or is gone by then fails there).
    seen = read_once(handed)
    table, lens = course_tolist(seen, "block_table"), course_tolist(seen, "context_lens")
    # Compared as the course compares them, their own .tolist() with lists.
    expect(equals_list(table, [[0, 1]]), INVARIANT,
           f"{where}: metadata block_table.tolist() {table!r:.200}, expected [[0, 1]]")  # fmt: skip
    expect(equals_list(lens, [6]), INVARIANT, f"{where}: metadata context_lens.tolist() {lens!r:.200}, expected [6]")
    shapes = (seen.key_pages.shape, seen.value_pages.shape)  # their own .shape, as the course compares it
    expect(shapes == ((2, 2, 4, COURSE_HEAD_DIM),) * 2, INVARIANT,
           f"{where}: key/value_pages shapes {shapes}, expected the pool's 2 pages, (2, 2, 4, 4)")  # fmt: skip
    layout = metadata_layout(query, metadata, "float32", "causal", 4)
    expect_close(INVARIANT, f"{where}: attention with the metadata's own mask vs causal attention over the 6 tokens",
                 got, written.attention(query, "causal"), layout)  # fmt: skip
    expect_close_to_its_gather(INVARIANT, f"{where}: attention with the metadata's own mask", got, query, tokens, layout)


@pytest.mark.beyond_course
@given(layout=paged_layouts(num_queries=(1, 3, 8), masks=(None, "causal"), max_batch=3))
def test_attention_reads_exactly_the_context(paged_attention: object, layout: PagedLayout) -> None:
    expect_close(
        INVARIANT, "paged attention vs the float64 reference", attention_output(paged_attention, layout),
        layout.reference_output(), layout,
    )


def _position(layout: PagedLayout, row: int, token: int) -> tuple[int, int]:
    """(page id, slot) holding logical token `token` of request `row`."""
    return int(layout.block_table[row, token // layout.page_size]), token % layout.page_size


@pytest.mark.beyond_course
@pytest.mark.parametrize("page_size", [2, 5, 16])
def test_slot_after_the_context_is_never_read(
    paged_attention: object, page_size: int, rng: np.random.Generator
) -> None:
    # Every context ends inside a page, so the next slot exists and holds NaN.
    contexts = [k * page_size + r for k, r in [(0, 1), (1, page_size - 1), (2, max(1, page_size // 2))]]
    layout = random_layout(rng, context_lens=contexts, page_size=page_size, spare_pages=1)
    for row, n in enumerate(contexts):
        page, slot = _position(layout, row, n)
        assert np.isnan(layout.key_pages[page, :, slot]).all(), "the builder poisons slots past the context"
    expect_close(
        INVARIANT, "one slot past each context holds NaN and must not be read",
        attention_output(paged_attention, layout), layout.reference_output(), layout,
    )


@pytest.mark.beyond_course
@pytest.mark.parametrize("page_size", [1, 4, 16])
def test_last_token_of_the_context_is_read(paged_attention: object, page_size: int, rng: np.random.Generator) -> None:
    # The last token's value is far from every other, so dropping it moves the output a lot.
    contexts = [page_size, 2 * page_size + 1, 3 * page_size - 1]
    layout = random_layout(rng, context_lens=contexts, page_size=page_size)
    values = layout.value_pages.copy()
    for row, n in enumerate(contexts):
        page, slot = _position(layout, row, n - 1)
        values[page, :, slot] = 64.0
    layout = replace(layout, value_pages=values)
    expect_close(
        INVARIANT, "the last token of each context carries value 64 and must be read",
        attention_output(paged_attention, layout), layout.reference_output(), layout,
    )


def _expect_the_courses_rewind(pool_type: type, cache_type: type, rng: np.random.Generator) -> None:
    """The course's rewind test on hidden tokens: page_lens [4, 4, 1] before the rewind; gather_dense() called
    right after it, then, as its asserts read them, offset 6, page_lens [4, 2] (lists, as its asserts compare), 2
    pages of a full page's capacity each, 3 issued with 1 free, and the gathered keys and values the first 6
    tokens."""
    written = WrittenKv(2, COURSE_HEAD_DIM, "float32")
    pool, cache, filled, gathered = course_rewind(pool_type, cache_type, written, rng)
    expect(not filled, INVARIANT,
           f"4, 3 and 2 tokens appended through update_and_fetch in pages of 4: page_lens is {filled}, expected "
           "[4, 4, 1]")  # fmt: skip
    step = "4, 3 and 2 tokens appended in pages of 4, then rewind(3) and gather_dense() (the course's rewind)"
    expect(cache.offset == 6, INVARIANT, f"{step}: offset is {cache.offset}, expected 6")
    expect(equals_list(cache.page_lens, [4, 2]), INVARIANT, f"{step}: page_lens is {cache.page_lens!r}, expected [4, 2]")
    expect(cache.num_pages == 2, INVARIANT, f"{step}: {cache.num_pages} pages, expected 2")
    expect(
        pool.num_pages == 3 and pool.num_free_pages == 1, INVARIANT,
        f"{step}: the pool has {pool.num_free_pages} of {pool.num_pages} pages free, expected 1 of 3",
    )
    capacity = [int(pool.read_page(page_id)[0].shape[2]) for page_id in cache.page_ids]
    expect(capacity == [4, 4], INVARIANT, f"{step}: read_page() gives pages of {capacity} slots, expected [4, 4]")
    # The course compares them with assert_allclose, which reads an array's dtype first.
    expect_arrays(INVARIANT, f"{step}: gather_dense()", *gathered)
    keys, values = (to_numpy(x, np.float64)[0] for x in gathered)
    expect(
        same_tokens(keys, written.keys) and same_tokens(values, written.values), INVARIANT,
        f"{step}: gather_dense() differs from the first 6 tokens written",
    )


@split_at_the_course(f"{DAY_3}::test_task_1_paged_cache_rewind",
                     Geometry(page_sizes=(1, 3, 4), kv_heads=(2,), head_dim=HEAD_DIM), per_page_size=True)
def test_rewind_to_every_offset_then_append(
    pool_type: type, cache_type: type, paged_attention: object, geometry: Geometry, page_size: int,
    rng: np.random.Generator,
) -> None:
    # The course's case is its own rewind (calls.course_rewind): 4, 3 and 2 tokens through update_and_fetch, then
    # rewind(3), read as its test reads it. Beyond the course: every target from 0 to the whole context, page
    # boundaries (whole numbers of pages) included, each followed by appends.
    if geometry.course:
        _expect_the_courses_rewind(pool_type, cache_type, rng)
        return
    total = 3 * page_size + 1
    for target in range(total + 1):
        pool = pool_type(page_size)
        cache = cache_type(pool)
        if not callable(getattr(cache, "rewind", None)):
            pytest.skip("the subject's TinyKvPagedCache has no rewind")
        written = WrittenKv(2, geometry.head_dim, "float32")
        cache.update_and_fetch_paged(*written.make_chunk(rng, total))
        issued = pool.num_pages
        cache.rewind(total - target)
        written.truncate(target)
        step = f"rewind({total - target}) of {total} tokens to {target} (page_size={page_size})"
        pages = -(-target // page_size)
        fills = [page_size] * (pages - 1) + [target - (pages - 1) * page_size] if pages else []
        expect(cache.offset == target, INVARIANT, f"{step}: offset is {cache.offset}")
        _expect_own_context_lens(cache, target, geometry, step)
        expect(
            cache.num_pages == pages and [int(n) for n in cache.page_lens] == fills, INVARIANT,
            f"{step}: {cache.num_pages} pages filled {list(cache.page_lens)}, expected {pages} filled {fills}",
        )
        expect(
            pool.num_pages == issued and pool.num_free_pages == issued - pages, INVARIANT,
            f"{step}: the pool has {pool.num_free_pages} of {pool.num_pages} pages free, expected {issued - pages} of {issued}",
        )
        if target:
            keys, values = (to_numpy(x, np.float64)[0] for x in cache.gather_dense())
            expect(
                np.array_equal(keys, written.keys) and np.array_equal(values, written.values), INVARIANT,
                f"{step}: gather_dense() differs from the first {target} tokens written",
            )
        # Appends after the rewind: a chunk that crosses a page boundary, then a decode step.
        for length in (page_size + 1, 1):
            metadata = read_once(cache.update_and_fetch_paged(*written.make_chunk(rng, length)))
            then = f"{step}, then {length} appended ({written.length} tokens)"
            expect(cache.offset == written.length, INVARIANT, f"{then}: offset is {cache.offset}")
            in_metadata = to_numpy(metadata.context_lens).tolist()
            expect(in_metadata == [written.length], INVARIANT, f"{then}: metadata context_lens is {in_metadata}")
            mask = "causal" if length > 1 else None
            query = written.make_query(rng, 4, length)
            layout = metadata_layout(query, metadata, "float32", mask, page_size)
            expect_pages_hold(INVARIANT, f"{then}: the metadata", layout, {0: written})
            expect_close(
                INVARIANT, f"{then}: attention over the cache",
                attention_over_metadata(paged_attention, query, metadata, mask), written.attention(query, mask), layout,
            )
