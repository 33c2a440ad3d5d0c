"""dispatch_paths: query lengths on both sides of the decode/prefill split match the reference.

Fast kernels pick a schedule by query length (a decode kernel for L <= 8, a
prefill kernel above); L = 8 and 9 sit on either side of that line. With the
causal mask the L queries are the last L positions of the context.
"""

from __future__ import annotations

import numpy as np
import pytest

from pagecheck.invariants.verdict import expect_reference
from pagecheck.reference.layouts import random_layout

INVARIANT = "dispatch_paths"
pytestmark = pytest.mark.invariant(INVARIANT)

QUERY_LENGTHS = (1, 2, 7, 8, 9, 16, 33)


@pytest.mark.beyond_course
@pytest.mark.parametrize("mask", [None, "causal"])
@pytest.mark.parametrize("num_queries", QUERY_LENGTHS)
def test_query_length_matches_the_reference(
    paged_attention: object, num_queries: int, mask: str | None, rng: np.random.Generator
) -> None:
    contexts = [num_queries, num_queries + 5, 3 * 8 + num_queries]
    layout = random_layout(rng, context_lens=contexts, page_size=8, num_queries=num_queries, mask=mask)
    expect_reference(INVARIANT, f"L={num_queries} mask={mask}", paged_attention, layout)
