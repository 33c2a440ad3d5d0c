"""gqa_mapping: consecutive query heads share a kv head, h -> h // (H_q / H_kv), for groups 1 to 8.

With two or three kv heads of unrelated values, any other head mapping reads
the wrong kv head for some query head and misses the reference.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given

from pagecheck.invariants.course import COURSE_PREFILL_CONTEXT, COURSE_PREFILL_ROWS, DAY_4
from pagecheck.invariants.strategies import MAX_GROUP, paged_layouts
from pagecheck.invariants.calls import course_call_on_a_layout
from pagecheck.invariants.verdict import expect_close, expect_reference
from pagecheck.reference.layouts import COURSE_UNUSED_FILL, PagedLayout, random_layout

INVARIANT = "gqa_mapping"
pytestmark = pytest.mark.invariant(INVARIANT)


# The course's groups: 4 query heads over 2 kv heads (head dim 4, float32), and 8 over 2 (head dim 128, bfloat16).
COURSE_GROUPS = ((2, 4, "float32"), (4, 128, "bfloat16"))
# The calls each makes in the course, as (query rows, contexts, page size): group 2 decodes a batch and prefills
# one request (the course's 3 rows over 6 tokens); group 4 (bfloat16) decodes one request over pages of 32.
# Tables are exactly as wide as needed, 3 pages at most (COURSE_MAX_PAGES); the batch's decode token stays in each
# request's tail page, as the course's does (the subject's own batch is asked for its mask).
COURSE_CALLS = {2: ((1, [11, 6], 4), (COURSE_PREFILL_ROWS, [COURSE_PREFILL_CONTEXT], 4)), 4: ((1, [65], 32),)}
# Every other case: a decode and a prefill of a batch of two over pages of 4, with a spare table column.
WIDER_CALLS = ((1, [13, 6], 4), (4, [13, 6], 4))


def _group_params() -> list:
    """(group, H_kv, head dim, dtype, course) per case: the course's two groups are course checks (called with
    the mask the subject's own caches hand out for the call, as the course calls); every group from 1 to
    MAX_GROUP over 2 and 3 kv heads of head dim 32 is the same check beyond the course (an implementation the
    course accepts may take only the groups its tests use)."""
    course = pytest.mark.course(f"{DAY_4}::test_task_1_paged_attention_matches_dense_attention")
    params = [pytest.param(group, 2, head_dim, dtype, True, marks=course, id=f"course-{group}-2")
              for group, head_dim, dtype in COURSE_GROUPS]
    params += [pytest.param(group, kv_heads, 32, "float32", False, marks=pytest.mark.beyond_course,
                            id=f"{group}-{kv_heads}")
               for kv_heads in (2, 3) for group in range(1, MAX_GROUP + 1)]
    return params


@pytest.mark.parametrize("group, num_kv_heads, head_dim, dtype, course", _group_params())
def test_query_heads_read_their_groups_kv_head(
    paged_attention: object, group: int, num_kv_heads: int, head_dim: int, dtype: str, course: bool,
    rng: np.random.Generator, own_metadata: Callable[[PagedLayout], Any],
) -> None:
    for num_queries, contexts, page_size in COURSE_CALLS[group] if course else WIDER_CALLS:
        mask = "causal" if course or num_queries > 1 else None
        layout = random_layout(
            rng, context_lens=contexts, page_size=page_size, num_queries=num_queries, mask=mask, head_dim=head_dim,
            dtype=dtype, num_q_heads=group * num_kv_heads, num_kv_heads=num_kv_heads,
            extra_columns=0 if course else 1, unused_fill=COURSE_UNUSED_FILL,
        )
        what = f"H_q/H_kv = {group} with H_kv = {num_kv_heads}"
        if not course:
            expect_reference(INVARIANT, what, paged_attention, layout)
            continue
        # As the course calls: over the metadata the subject's own caches hand out, the layout's tokens in them.
        got = course_call_on_a_layout(paged_attention, layout, own_metadata)
        expect_close(INVARIANT, what, got, layout.reference_output(), layout)


@pytest.mark.beyond_course
@given(layout=paged_layouts(max_group=MAX_GROUP, kv_heads=(1, 2, 4), num_queries=(1, 3), masks=(None, "causal")))
def test_any_group_size_matches_the_reference(paged_attention: object, layout: PagedLayout) -> None:
    expect_reference(INVARIANT, "grouped-query attention vs the reference", paged_attention, layout)
