"""batch_consistency: each row of a batched call equals the same request called alone.

Every row is also checked against the reference, so a subject that is
consistently wrong in both calls still fails.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given

from pagecheck.invariants.calls import attention_output, course_call_on_a_layout
from pagecheck.invariants.course import COURSE_HEAD_DIM, COURSE_MAX_BATCH, COURSE_MAX_PAGES, COURSE_PAGE_SIZE, DAY_4
from pagecheck.invariants.strategies import paged_layouts
from pagecheck.invariants.verdict import expect_close
from pagecheck.reference.layouts import COURSE_UNUSED_FILL, PagedLayout, random_layout

INVARIANT = "batch_consistency"
pytestmark = pytest.mark.invariant(INVARIANT)


def _row(layout: PagedLayout, b: int, exact_width: bool = False) -> PagedLayout:
    """Request b alone; with `exact_width`, its table only as wide as its pages, as the course's tables are."""
    width = -(-int(layout.context_lens[b]) // layout.page_size) if exact_width else layout.block_table.shape[1]
    return replace(
        layout, query=layout.query[b : b + 1], block_table=layout.block_table[b : b + 1, :width],
        context_lens=layout.context_lens[b : b + 1],
    )


def _check_rows(
    paged_attention: object, layout: PagedLayout, live_only: bool = False,
    own_metadata: Callable[[PagedLayout], Any] | None = None,
) -> None:
    """The batched call against the reference and each row against its request alone. `live_only` is the course's
    view: only live rows are compared, and a request alone has a table exactly as wide as its pages. With
    `own_metadata`, each call goes over the metadata the subject's own caches hand out once its tokens are written
    through them, as the course calls (calls.course_call_on_a_layout)."""

    def output(called: PagedLayout) -> np.ndarray:
        if own_metadata is None:
            return attention_output(paged_attention, called)
        return course_call_on_a_layout(paged_attention, called, own_metadata)

    batched = output(layout)
    want = layout.reference_output()
    # The course compares only the live rows of its batch; what a row of context 0 gives is beyond it (empty_rows).
    rows = [b for b, n in enumerate(layout.context_lens) if n > 0 or not live_only]
    expect_close(INVARIANT, "the batched call vs the reference", batched[rows], want[rows], layout)
    if own_metadata is not None:
        # The course compares its batch's rows with dense attention alone (the reference above): a request called
        # on its own would be a float32 decode of one request, which the course never makes (course.attends_alone).
        return
    for b in rows:
        alone = _row(layout, b, exact_width=live_only)
        expect_close(
            INVARIANT, f"row {b} of the batched call vs request {b} alone", batched[b : b + 1],
            output(alone), alone,
        )


@pytest.mark.beyond_course
@given(layout=paged_layouts(max_batch=4, allow_empty_rows=True, num_queries=(1, 4), masks=(None, "causal")))
def test_batched_rows_equal_single_requests(paged_attention: object, layout: PagedLayout) -> None:
    _check_rows(paged_attention, layout)


# The course batches decode only (its one prefill is a single request), over a table exactly as wide as its
# widest row, COURSE_MAX_BATCH rows at most: its batch's empty row lies between two live ones.
COURSE_BATCH = f"{DAY_4}::test_task_2_batched_paged_attention_matches_dense_attention"
COURSE_CONTEXTS = [6, 0, COURSE_MAX_PAGES * COURSE_PAGE_SIZE]
CONTEXTS = [6, COURSE_MAX_PAGES * COURSE_PAGE_SIZE, 0, 10]


@pytest.mark.parametrize("num_queries, context_lens", [
    pytest.param(1, COURSE_CONTEXTS, id="decode", marks=pytest.mark.course(COURSE_BATCH)),
    pytest.param(1, CONTEXTS, id="decode-of-4-rows", marks=pytest.mark.beyond_course),
    pytest.param(4, CONTEXTS, id="prefill", marks=pytest.mark.beyond_course),
])
def test_rows_of_different_lengths(
    paged_attention: object, num_queries: int, context_lens: list[int], rng: np.random.Generator,
    own_metadata: Callable[[PagedLayout], Any],
) -> None:
    # The course's geometry and call: 4 query heads over 2 kv heads of head dim 4, pages of 4; its decode goes over
    # the metadata the subject's own batch hands out once the layout's tokens are in it (the cases beyond the
    # course: the layout itself, "causal"), a decode step that stays in each request's tail page, as the course's
    # does (no context one past a full page).
    course = context_lens is COURSE_CONTEXTS
    layout = random_layout(
        rng, context_lens=context_lens, page_size=COURSE_PAGE_SIZE, num_queries=num_queries,
        num_q_heads=4, num_kv_heads=2, head_dim=COURSE_HEAD_DIM, mask="causal", extra_columns=0,
        unused_fill=COURSE_UNUSED_FILL,
    )
    _check_rows(paged_attention, layout, live_only=True, own_metadata=own_metadata if course else None)
