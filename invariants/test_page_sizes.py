"""page_sizes: page sizes 1, 3, 16, 128 and larger (odd and even) match the reference.

Each batch holds a context inside the first page, one just past it, and one
spanning several pages, so every request crosses at least one page boundary
but the first.
"""

from __future__ import annotations

import numpy as np
import pytest

from pagecheck.invariants.verdict import expect_reference
from pagecheck.reference.layouts import random_layout

INVARIANT = "page_sizes"
pytestmark = pytest.mark.invariant(INVARIANT)

PAGE_SIZES = (1, 3, 16, 128, 129, 256)


@pytest.mark.beyond_course
@pytest.mark.parametrize("num_queries, mask", [(1, None), (9, "causal")], ids=["decode", "prefill"])
@pytest.mark.parametrize("page_size", PAGE_SIZES)
def test_page_size_matches_the_reference(
    paged_attention: object, page_size: int, num_queries: int, mask: str | None, rng: np.random.Generator
) -> None:
    contexts = [max(n, num_queries) for n in (page_size - 1, page_size + 1, 2 * page_size + page_size // 2 + 5)]
    layout = random_layout(rng, context_lens=contexts, page_size=page_size, num_queries=num_queries, mask=mask)
    expect_reference(INVARIANT, f"page_size={page_size}", paged_attention, layout)
