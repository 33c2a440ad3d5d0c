"""empty_rows: a row with context 0 (table row all -1) gives zeros, and live rows beside it stay correct."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

from pagecheck.invariants.strategies import paged_layouts
from pagecheck.invariants.verdict import expect_reference
from pagecheck.reference.layouts import PagedLayout, random_layout

INVARIANT = "empty_rows"
pytestmark = pytest.mark.invariant(INVARIANT)


@pytest.mark.beyond_course
@pytest.mark.parametrize("num_queries, mask", [(1, None), (4, "causal")], ids=["decode", "prefill"])
@pytest.mark.parametrize("contexts", [[0, 9, 0, 5, 0], [0], [0, 0, 12]], ids=["interleaved", "alone", "leading"])
def test_empty_rows_give_zeros(
    paged_attention: object, contexts: list[int], num_queries: int, mask: str | None, rng: np.random.Generator
) -> None:
    layout = random_layout(rng, context_lens=contexts, page_size=4, num_queries=num_queries, mask=mask, spare_pages=2)
    expect_reference(INVARIANT, "rows with context 0 must be zeros", paged_attention, layout)


@pytest.mark.beyond_course
@given(layout=paged_layouts(allow_empty_rows=True, max_batch=4, num_queries=(1, 3), masks=(None, "causal")))
def test_empty_rows_among_live_rows(paged_attention: object, layout: PagedLayout) -> None:
    expect_reference(INVARIANT, "a batch with empty rows vs the reference", paged_attention, layout)
