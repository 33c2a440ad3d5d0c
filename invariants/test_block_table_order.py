"""block_table_order: the block table is read in order, and only its order gives logical order.

Gathering a cache through its block table reproduces the tokens in the order
they were written, with requests interleaved on one pool so their pages are
not contiguous. A causal prefill sees its keys in logical order, so
reordering complete pages must change its output; a one-token decode without
a mask sees a set of keys, so reordering complete pages must not; renaming
physical pages consistently in the pages and the table must not either.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from invariants.calls import attention_output
from invariants.course import DAY_3
from invariants.strategies import SMALL_PAGE_SIZES, chunk_plans, paged_layouts, seeds
from invariants.verdict import expect, expect_close
from invariants.workload import WrittenKv
from reference.arrays import to_numpy
from reference.attention import gather_dense
from reference.layouts import PagedLayout, random_layout
from reference.tolerance import compare

INVARIANT = "block_table_order"
pytestmark = pytest.mark.invariant(INVARIANT)

HEAD_DIM = 32


@pytest.mark.course(f"{DAY_3}::test_task_1_paged_cache_matches_full_cache")
@given(page_size=st.sampled_from(SMALL_PAGE_SIZES), requests=st.integers(2, 3), seed=seeds(), data=st.data())
def test_gather_reproduces_tokens_in_logical_order(
    pool_type: type, cache_type: type, page_size: int, requests: int, seed: int, data: st.DataObject
) -> None:
    rng = np.random.default_rng(seed)
    pool = pool_type(page_size)
    caches = [cache_type(pool) for _ in range(requests)]
    records = [WrittenKv(2, HEAD_DIM, "float32") for _ in range(requests)]
    plans = [data.draw(chunk_plans(page_size=page_size, max_decode=3), label=f"request {r}") for r in range(requests)]
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
            np.array_equal(keys[0], record.keys) and np.array_equal(values[0], record.values),
            INVARIANT, f"{where}: gather_dense() differs from the tokens written, in order",
        )
        table_keys, table_values = gather_dense(
            pool.key_pages, pool.value_pages, cache.block_table(), cache.context_lens(), page_size
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
