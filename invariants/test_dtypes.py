"""dtypes: float32, bfloat16 and float16 inputs match the float64 reference within reference/tolerance.py.

Layout values are rounded to the dtype up front, so the reference sees the
very numbers the subject does and the only error left is the subject's own
arithmetic and output rounding.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

from pagecheck.invariants.strategies import paged_layouts
from pagecheck.invariants.verdict import expect_reference
from pagecheck.reference.layouts import DTYPES, PagedLayout, random_layout

INVARIANT = "dtypes"
pytestmark = pytest.mark.invariant(INVARIANT)


@pytest.mark.parametrize("num_queries, mask", [(1, None), (6, "causal")], ids=["decode", "prefill"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_dtype_within_tolerance(
    paged_attention: object, dtype: str, num_queries: int, mask: str | None, rng: np.random.Generator
) -> None:
    layout = random_layout(
        rng, context_lens=[70, 9, 33], page_size=16, num_queries=num_queries, mask=mask, dtype=dtype, head_dim=64
    )
    expect_reference(INVARIANT, f"{dtype} vs the float64 reference", paged_attention, layout)


@given(layout=paged_layouts(dtypes=DTYPES, num_queries=(1, 4), masks=(None, "causal"), head_dims=(32, 64)))
def test_any_layout_within_its_dtype_tolerance(paged_attention: object, layout: PagedLayout) -> None:
    expect_reference(INVARIANT, f"{layout.dtype} vs the float64 reference", paged_attention, layout)
