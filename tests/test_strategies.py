"""The suite's Hypothesis strategies keep the bounds they promise."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pagecheck.invariants.strategies import chunk_plans


@given(data=st.data(), page_size=st.integers(1, 8), pages=st.integers(1, 4))
def test_a_plan_with_max_total_writes_at_most_that_many_tokens(data: st.DataObject, page_size: int, pages: int) -> None:
    most = pages * page_size
    plan = data.draw(chunk_plans(page_size=page_size, max_total=most))
    assert plan and all(length >= 1 for length in plan) and sum(plan) <= most


@given(data=st.data(), page_size=st.integers(1, 8), first=st.integers(1, 3))
def test_a_plans_first_chunk_holds_min_first_tokens(data: st.DataObject, page_size: int, first: int) -> None:
    plan = data.draw(chunk_plans(page_size=page_size, max_total=3 * page_size + first, min_first=first))
    assert plan[0] >= first and sum(plan) <= 3 * page_size + first
