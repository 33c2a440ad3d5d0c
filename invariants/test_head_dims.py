"""head_dims: head dims 32, 64 and 128 match the reference, with the default scale D**-0.5 and an explicit one."""

from __future__ import annotations

import numpy as np
import pytest

from pagecheck.invariants.strategies import HEAD_DIMS
from pagecheck.invariants.verdict import expect_reference
from pagecheck.reference.layouts import random_layout

INVARIANT = "head_dims"
pytestmark = pytest.mark.invariant(INVARIANT)


@pytest.mark.beyond_course
@pytest.mark.parametrize("num_queries, mask", [(1, None), (5, "causal")], ids=["decode", "prefill"])
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_head_dim_matches_the_reference(
    paged_attention: object, head_dim: int, num_queries: int, mask: str | None, rng: np.random.Generator
) -> None:
    layout = random_layout(
        rng, context_lens=[21, 8, 40], page_size=8, num_queries=num_queries, mask=mask, head_dim=head_dim
    )
    expect_reference(INVARIANT, f"D={head_dim} with the default scale D**-0.5", paged_attention, layout)
    expect_reference(INVARIANT, f"D={head_dim} with scale=0.3", paged_attention, layout, scale=0.3)
