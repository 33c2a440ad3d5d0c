"""gqa_mapping: consecutive query heads share a kv head, h -> h // (H_q / H_kv), for groups 1 to 8.

With two or three kv heads of unrelated values, any other head mapping reads
the wrong kv head for some query head and misses the reference.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

from pagecheck.invariants.course import DAY_4
from pagecheck.invariants.strategies import MAX_GROUP, paged_layouts
from pagecheck.invariants.verdict import expect_reference
from pagecheck.reference.layouts import COURSE_UNUSED_FILL, PagedLayout, random_layout

INVARIANT = "gqa_mapping"
pytestmark = pytest.mark.invariant(INVARIANT)


@pytest.mark.course(f"{DAY_4}::test_task_1_paged_attention_matches_dense_attention")
@pytest.mark.parametrize("num_kv_heads", [2, 3])
@pytest.mark.parametrize("group", range(1, MAX_GROUP + 1))
def test_query_heads_read_their_groups_kv_head(
    paged_attention: object, group: int, num_kv_heads: int, rng: np.random.Generator
) -> None:
    for num_queries, mask in ((1, None), (4, "causal")):
        layout = random_layout(
            rng, context_lens=[13, 6], page_size=4, num_queries=num_queries, mask=mask,
            num_q_heads=group * num_kv_heads, num_kv_heads=num_kv_heads, unused_fill=COURSE_UNUSED_FILL,
        )
        expect_reference(INVARIANT, f"H_q/H_kv = {group} with H_kv = {num_kv_heads}", paged_attention, layout)


@pytest.mark.beyond_course
@given(layout=paged_layouts(max_group=MAX_GROUP, kv_heads=(1, 2, 4), num_queries=(1, 3), masks=(None, "causal")))
def test_any_group_size_matches_the_reference(paged_attention: object, layout: PagedLayout) -> None:
    expect_reference(INVARIANT, "grouped-query attention vs the reference", paged_attention, layout)
