"""page_boundaries: contexts of k*page_size - 1, k*page_size and k*page_size + 1 match the reference.

One batch holds all three, so a subject that reads a partly filled tail page
whole (its unwritten slots hold NaN), or drops a partial chunk of keys,
misses the reference on at least one row.
"""

from __future__ import annotations

import numpy as np
import pytest

from pagecheck.invariants.verdict import expect_reference
from pagecheck.reference.layouts import random_layout

INVARIANT = "page_boundaries"
pytestmark = pytest.mark.invariant(INVARIANT)


@pytest.mark.beyond_course
@pytest.mark.parametrize("num_queries, mask", [(1, None), (3, "causal")], ids=["decode", "prefill"])
@pytest.mark.parametrize("pages", [1, 2, 3])
@pytest.mark.parametrize("page_size", [2, 4, 8, 32])
def test_contexts_around_a_page_boundary(
    paged_attention: object, page_size: int, pages: int, num_queries: int, mask: str | None, rng: np.random.Generator
) -> None:
    boundary = pages * page_size
    contexts = [max(n, num_queries) for n in (boundary - 1, boundary, boundary + 1)]
    layout = random_layout(rng, context_lens=contexts, page_size=page_size, num_queries=num_queries, mask=mask)
    expect_reference(INVARIANT, f"contexts around {pages} x page_size={page_size}", paged_attention, layout)
