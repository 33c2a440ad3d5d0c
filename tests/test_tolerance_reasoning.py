"""The float32 tolerance, held to its stated reasoning (reference/tolerance.py).

float32 gets 2e-5 because a float32 kernel's error is that of summing in
another order, about sqrt(S) units of float32 roundoff, while a kernel whose
matmuls run in TF32 (MLX's default for float32 on CUDA: a 10-bit mantissa,
about 1e-3 relative error) is not computing float32 at all. So: the suite's
own float32 verdict must pass a float32 computation at long contexts and
fail the same computation on TF32-rounded inputs. Were the float32 tolerance
ever loosened to TF32's size, the second half fails.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import pytest

from pagecheck.invariants.calls import ATTENTION_ARGUMENTS
from pagecheck.invariants.verdict import InvariantViolation, expect_reference
from pagecheck.reference import attention_mx
from pagecheck.reference.layouts import PagedLayout, random_layout
from pagecheck.reference.tolerance import TOLERANCES

TF32_MANTISSA_BITS = 10
FLOAT32_MANTISSA_BITS = 23
LONG_CONTEXT = 32768  # the context the float32 tolerance is derived at


def round_to_tf32(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to nearest (ties to even) with a 10-bit mantissa, as TF32 matmul inputs are."""
    dropped = FLOAT32_MANTISSA_BITS - TF32_MANTISSA_BITS
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    half = (1 << (dropped - 1)) - 1
    rounded = ((bits + half + ((bits >> dropped) & 1)) >> dropped) << dropped
    out = rounded.astype(np.uint32).view(np.float32)
    return np.where(np.isfinite(x), out, x)


def float32_subject(*args: Any, **options: Any) -> Any:
    """The readable mlx.core oracle: float32 math on the CPU."""
    return attention_mx.paged_attention(*args, **options)


def tf32_subject(*args: Any, **options: Any) -> Any:
    """The same float32 computation on query, keys and values rounded to TF32, as a TF32 matmul sees them."""
    import mlx.core as mx

    inputs = dict(zip(ATTENTION_ARGUMENTS, args), **options)
    for name in ("query", "key_pages", "value_pages"):
        inputs[name] = mx.array(round_to_tf32(np.array(inputs[name])))
    return attention_mx.paged_attention(**inputs)


@functools.cache
def _layouts() -> dict[str, PagedLayout]:
    rng = np.random.default_rng(5)
    return {
        "decode-70": random_layout(rng, context_lens=[70, 9, 33], page_size=16, head_dim=64),
        "prefill-3000": random_layout(
            rng, context_lens=[3000, 17], page_size=128, num_queries=4, mask="causal", head_dim=128
        ),
        f"decode-{LONG_CONTEXT}": random_layout(
            rng, context_lens=[LONG_CONTEXT], page_size=256, num_q_heads=2, num_kv_heads=1, head_dim=64
        ),
    }


def test_the_rounding_is_tf32() -> None:
    x = np.array([1 + 2.0**-10, 1 + 2.0**-11, 1 + 3 * 2.0**-11, 1 + 2.0**-12, np.nan], dtype=np.float32)
    got = round_to_tf32(x)
    assert got[:4].tolist() == [1 + 2.0**-10, 1.0, 1 + 2 * 2.0**-10, 1.0]  # ties go to the even mantissa
    assert np.isnan(got[4])


def test_the_table_sits_between_float32_summation_error_and_tf32_roundoff() -> None:
    tol = TOLERANCES["float32"]
    assert math.sqrt(LONG_CONTEXT) * 2.0**-24 < tol.rtol < 2.0 ** -(TF32_MANTISSA_BITS + 1)


@pytest.mark.parametrize("name", list(_layouts()))
def test_float32_math_passes_the_float32_verdict(name: str) -> None:
    expect_reference("dtypes", "float32 math", float32_subject, _layouts()[name])


# Over tens of thousands of random keys attention is nearly an average and TF32's rounding averages away
# with it; where the output rests on fewer keys it shows, as it does in a real model.
@pytest.mark.parametrize("name", ["decode-70", "prefill-3000"])
def test_tf32_math_fails_the_float32_verdict(name: str) -> None:
    with pytest.raises(InvariantViolation, match=r"^\[dtypes\] TF32"):
        expect_reference("dtypes", "TF32 math", tf32_subject, _layouts()[name])
