"""dtypes: float32, bfloat16 and float16 inputs match the float64 reference within reference/tolerance.py.

Layout values are rounded to the dtype up front, so the reference sees the
very numbers the subject does and the only error left is the subject's own
arithmetic and output rounding. The course's clause is its one case: a
bfloat16 decode gives an MLX bfloat16 output within tolerance. Beyond the
course, every dtype, decode and prefill, within its tolerance, and an MLX
output keeps the query's dtype. A subject may decline float16
(invariants/dtype_support.py); float32 and bfloat16 are required.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagecheck.invariants.calls import attention_as_the_course_calls, call_attention, metadata_layout, read_once
from pagecheck.invariants.dtype_support import require_dtype
from pagecheck.invariants.profiles import shared_examples
from pagecheck.invariants.strategies import paged_layouts
from pagecheck.invariants.verdict import (
    expect, expect_close, expect_close_to_its_gather, expect_pages_hold, expect_reference, gathered,
)
from pagecheck.invariants.workload import WrittenKv
from pagecheck.reference.arrays import to_numpy
from pagecheck.reference.layouts import COURSE_UNUSED_FILL, DTYPES, random_layout

INVARIANT = "dtypes"
pytestmark = pytest.mark.invariant(INVARIANT)


@pytest.mark.replays_the_course
@pytest.mark.course("test_week_3_day_4.py::test_paged_attention_preserves_bfloat16_for_decode")
def test_bfloat16_decode_keeps_bfloat16(
    pool_type: type, cache_type: type, paged_attention: object, rng: np.random.Generator
) -> None:
    """The course's case, as it builds and reads it: through the subject's own pool (pages of 32), a request of
    64 bfloat16 tokens at D=128, another of 32, then one decode token of the first with mask "causal"; a bfloat16
    query of 8 heads over the metadata, with its own mask. Its test asserts `output.dtype == mx.bfloat16`, which
    a NumPy output (NumPy has no bfloat16) never satisfies, and pages that are not bfloat16 fail its call."""
    import mlx.core as mx

    pool = pool_type(32)
    cache, blocker = cache_type(pool), cache_type(pool)
    written = WrittenKv(2, 128, "bfloat16")
    cache.update_and_fetch(*written.make_chunk(rng, 64))
    blocker.update_and_fetch(*WrittenKv(2, 128, "bfloat16").make_chunk(rng, 32))
    metadata = read_once(cache.update_and_fetch_paged(*written.make_chunk(rng, 1), mask="causal"))
    query = written.make_query(rng, 8, 1)
    tokens = gathered(INVARIANT, cache)  # before the attention, as the course's test reads it
    out = attention_as_the_course_calls(paged_attention, mx.array(query).astype(mx.bfloat16), metadata)
    layout = metadata_layout(query, metadata, "bfloat16", "causal", 32)
    # Read by the oracle: an attention that finds the tokens elsewhere passes the comparison below over pages
    # that hold nothing.
    expect_pages_hold(INVARIANT, "the course's bfloat16 decode: the metadata", layout, {0: written})
    kind = "an MLX" if type(out).__module__.startswith("mlx") else f"a {type(out).__module__.partition('.')[0]}"
    out_dtype = str(getattr(out, "dtype", None)).rsplit(".", 1)[-1]
    expect(
        kind == "an MLX" and out_dtype == "bfloat16", INVARIANT,
        f"a bfloat16 decode query over the cache's metadata gave {kind} array of dtype {out_dtype}; the output "
        "must be an MLX bfloat16 array", layout,
    )
    expect_close(INVARIANT, "bfloat16 decode over the cache vs the float64 oracle of the tokens written",
                 to_numpy(out, np.float64), written.attention(query, "causal"), layout)  # fmt: skip
    expect_close_to_its_gather(INVARIANT, "bfloat16 decode over the cache", to_numpy(out, np.float64), query, tokens,
                               layout)  # fmt: skip


@pytest.mark.beyond_course
def test_bfloat16_decode_of_a_batch_keeps_bfloat16(paged_attention: object, rng: np.random.Generator) -> None:
    # A batch of three bfloat16 decodes at D=128 over pages of 32, each context past a page boundary.
    layout = random_layout(rng, context_lens=[70, 9, 33], page_size=32, num_queries=1, mask="causal", dtype="bfloat16",
                           head_dim=128, unused_fill=COURSE_UNUSED_FILL)  # fmt: skip
    out = call_attention(paged_attention, layout.as_mx())
    out_dtype = str(getattr(out, "dtype", None)).rsplit(".", 1)[-1]
    expect(type(out).__module__.startswith("mlx") and out_dtype == "bfloat16", INVARIANT,
           f"a bfloat16 decode query gave a {type(out).__name__} of dtype {out_dtype}", layout)  # fmt: skip
    expect_close(INVARIANT, "bfloat16 decode vs the float64 reference", to_numpy(out, np.float64),
                 layout.reference_output(), layout)  # fmt: skip


@pytest.mark.beyond_course
@pytest.mark.parametrize("num_queries, mask", [(1, None), (6, "causal")], ids=["decode", "prefill"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_dtype_within_tolerance(
    paged_attention: object, dtype: str, num_queries: int, mask: str | None, rng: np.random.Generator
) -> None:
    require_dtype(paged_attention, dtype, INVARIANT)
    layout = random_layout(
        rng, context_lens=[70, 9, 33], page_size=16, num_queries=num_queries, mask=mask, dtype=dtype, head_dim=64
    )
    out = call_attention(paged_attention, layout.as_mx())
    out_dtype = getattr(out, "dtype", None)
    # NumPy has no bfloat16, so only an MLX output is held to the query's dtype.
    if type(out).__module__.startswith("mlx"):
        expect(str(out_dtype).rsplit(".", 1)[-1] == dtype, INVARIANT, f"{dtype} query gave a {out_dtype} output", layout)
    expect_close(INVARIANT, f"{dtype} vs the float64 reference", to_numpy(out, np.float64), layout.reference_output(), layout)


@pytest.mark.beyond_course
@pytest.mark.parametrize("dtype", DTYPES)
@shared_examples(len(DTYPES))
@given(data=st.data())
def test_any_layout_within_its_dtype_tolerance(paged_attention: object, dtype: str, data: st.DataObject) -> None:
    require_dtype(paged_attention, dtype, INVARIANT)
    layout = data.draw(paged_layouts(dtypes=(dtype,), num_queries=(1, 4), masks=(None, "causal"), head_dims=(32, 64)))
    expect_reference(INVARIANT, f"{layout.dtype} vs the float64 reference", paged_attention, layout)
