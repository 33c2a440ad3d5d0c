"""softmax_stability: large logits give finite outputs that match the reference.

Queries are scaled so the largest scores reach the hundreds, well past where
exp overflows float32 (about 88) unless the row maximum is subtracted first.
float32 uses a smaller scale: its tolerance is tight enough that the rounding
of a float32 dot product at logits in the hundreds would exceed it even for a
correct kernel.
"""

from __future__ import annotations

import numpy as np
import pytest

from pagecheck.invariants.dtype_support import require_dtype
from pagecheck.invariants.verdict import expect_reference
from pagecheck.reference.layouts import DTYPES, random_layout

INVARIANT = "softmax_stability"
pytestmark = pytest.mark.invariant(INVARIANT)

LOGIT_SCALES = {"float32": 20.0, "bfloat16": 100.0, "float16": 100.0}


@pytest.mark.beyond_course
@pytest.mark.parametrize("num_queries, mask", [(1, None), (5, "causal")], ids=["decode", "prefill"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_large_logits_stay_finite_and_correct(
    paged_attention: object, dtype: str, num_queries: int, mask: str | None, rng: np.random.Generator
) -> None:
    require_dtype(paged_attention, dtype, INVARIANT)
    layout = random_layout(
        rng, context_lens=[40, 7, 19], page_size=8, num_queries=num_queries, mask=mask, dtype=dtype,
        logit_scale=LOGIT_SCALES[dtype],
    )
    expect_reference(INVARIANT, f"logit_scale={LOGIT_SCALES[dtype]}", paged_attention, layout)
