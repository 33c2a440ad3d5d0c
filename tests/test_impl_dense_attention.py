"""impl.dense_attention (readable mlx.core) agrees with the float64 reference."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from pagecheck.impl.dense_attention import causal_mask, scaled_dot_product_attention_grouped
from pagecheck.reference.attention import dense_attention
from pagecheck.reference.layouts import DTYPES, round_to_dtype
from pagecheck.reference.tolerance import compare


def dense_inputs(rng: np.random.Generator, dtype: str, shape_q: tuple, shape_kv: tuple) -> tuple[np.ndarray, ...]:
    return tuple(round_to_dtype(rng.standard_normal(s), dtype) for s in (shape_q, shape_kv, shape_kv))


def test_causal_mask_lets_row_l_see_keys_up_to_l_plus_s_minus_l() -> None:
    mask = np.array(causal_mask(3, 5, mx.float32))
    assert (mask == 0).sum(axis=1).tolist() == [3, 4, 5]
    assert np.isneginf(mask[0, 3:]).all()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask", [None, "causal"])
@pytest.mark.parametrize("num_q_heads, num_kv_heads", [(2, 2), (8, 2)])
def test_grouped_attention_matches_reference(dtype: str, mask: str | None, num_q_heads: int, num_kv_heads: int) -> None:
    rng = np.random.default_rng([num_q_heads, len(dtype)])
    query, key, value = dense_inputs(rng, dtype, (2, num_q_heads, 3, 16), (2, num_kv_heads, 7, 16))
    mx_dtype = getattr(mx, dtype)
    got = scaled_dot_product_attention_grouped(
        *(mx.array(x).astype(mx_dtype) for x in (query, key, value)), mask=mask
    )
    assert got.dtype == mx_dtype
    result = compare(got, dense_attention(query, key, value, mask=mask), dtype)
    assert result.passed, result.summary()


def test_array_mask_is_added_to_scores() -> None:
    # Hiding keys 0 and 1 with -inf equals attending over keys 2.. only.
    rng = np.random.default_rng(3)
    query, key, value = dense_inputs(rng, "float32", (1, 4, 2, 16), (1, 2, 6, 16))
    additive = np.zeros((1, 1, 2, 6), dtype=np.float32)
    additive[..., :2] = -np.inf
    got = scaled_dot_product_attention_grouped(
        mx.array(query), mx.array(key), mx.array(value), scale=0.5, mask=mx.array(additive)
    )
    want = dense_attention(query, key[:, :, 2:], value[:, :, 2:], scale=0.5)
    assert compare(got, want, "float32").passed


def test_unknown_mask_name_is_rejected() -> None:
    query = mx.zeros((1, 2, 1, 8))
    with pytest.raises(NotImplementedError, match="sliding"):
        scaled_dot_product_attention_grouped(query, query, query, mask="sliding")
