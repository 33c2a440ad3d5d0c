"""The float64 reference against closed forms a reader can check by hand."""

from __future__ import annotations

import numpy as np
import pytest

from pagecheck.reference.attention import dense_attention, gather_dense, kv_head_for, paged_attention, visible_keys


def one_head_pages(num_pages: int, page_size: int, head_dim: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    keys = rng.standard_normal((num_pages, 1, page_size, head_dim))
    values = rng.standard_normal((num_pages, 1, page_size, head_dim))
    return keys, values


def test_one_visible_key_returns_its_value() -> None:
    rng = np.random.default_rng(0)
    keys, values = one_head_pages(3, 4, 8, rng)
    table = np.array([[2, -1]], dtype=np.int32)
    out = paged_attention(rng.standard_normal((1, 1, 1, 8)), keys, values, table, np.array([1]), 4)
    np.testing.assert_allclose(out[0, 0, 0], values[2, 0, 0])


def test_equal_keys_give_the_mean_of_values() -> None:
    rng = np.random.default_rng(1)
    _, values = one_head_pages(2, 4, 8, rng)
    keys = np.broadcast_to(rng.standard_normal(8), (2, 1, 4, 8)).copy()
    table = np.array([[1, 0]], dtype=np.int32)
    out = paged_attention(rng.standard_normal((1, 1, 1, 8)), keys, values, table, np.array([7]), 4)
    expected = np.concatenate([values[1, 0, :4], values[0, 0, :3]]).mean(axis=0)
    np.testing.assert_allclose(out[0, 0, 0], expected)


def test_seed_example_maps_positions_to_pages_12_5_3() -> None:
    # page_ids [12, 5, 3], context 10, page size 4: 0..3 -> 12, 4..7 -> 5, 8..9 -> 3.
    page_size, head_dim = 4, 2
    keys = np.full((13, 1, page_size, head_dim), np.nan)
    values = np.full_like(keys, np.nan)
    for position in range(10):
        page, slot = [12, 5, 3][position // 4], position % 4
        keys[page, 0, slot] = values[page, 0, slot] = position
    table = np.array([[12, 5, 3]], dtype=np.int32)
    dense_k, dense_v = gather_dense(keys, values, table, np.array([10]), page_size)
    np.testing.assert_array_equal(dense_k[0, 0, :, 0], np.arange(10))
    np.testing.assert_array_equal(dense_v[0, 0, :, 1], np.arange(10))


def test_causal_mask_is_aligned_to_the_end_of_the_context() -> None:
    # Context 6, L 3: the queries are positions 3, 4, 5 and see keys 0..3, 0..4, 0..5.
    visible = visible_keys(6, 3, "causal")
    assert visible.sum(axis=1).tolist() == [4, 5, 6]
    rng = np.random.default_rng(2)
    keys, values = one_head_pages(2, 4, 8, rng)
    query = rng.standard_normal((1, 1, 3, 8))
    table = np.array([[0, 1]], dtype=np.int32)
    out = paged_attention(query, keys, values, table, np.array([6]), 4, mask="causal")
    # Row 0 must equal plain attention over the first four keys only.
    first_four = paged_attention(query[:, :, :1], keys, values, table[:, :1], np.array([4]), 4)
    np.testing.assert_allclose(out[0, 0, 0], first_four[0, 0, 0])
    full = paged_attention(query[:, :, 2:], keys, values, table, np.array([6]), 4)
    np.testing.assert_allclose(out[0, 0, 2], full[0, 0, 0])


def test_gqa_head_h_reads_kv_head_h_div_group() -> None:
    assert [kv_head_for(h, 8, 2) for h in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    rng = np.random.default_rng(3)
    keys = rng.standard_normal((1, 2, 4, 8))
    values = np.zeros((1, 2, 4, 8))
    values[0, 0], values[0, 1] = 1.0, -1.0  # kv head 0 says +1, kv head 1 says -1
    out = paged_attention(rng.standard_normal((1, 4, 1, 8)), keys, values, np.array([[0]]), np.array([4]), 4)
    np.testing.assert_allclose(out[0, :, 0, 0], [1.0, 1.0, -1.0, -1.0])


def test_nan_in_unused_slots_never_reaches_the_output() -> None:
    rng = np.random.default_rng(4)
    keys, values = one_head_pages(3, 4, 8, rng)
    keys[1, :, 2:] = values[1, :, 2:] = np.nan  # tail of the last page, past the context
    keys[2] = values[2] = np.nan  # a page nobody owns
    out = paged_attention(rng.standard_normal((1, 1, 2, 8)), keys, values, np.array([[0, 1, -1]]), np.array([6]), 4, mask="causal")
    assert np.isfinite(out).all()


def test_context_zero_row_is_zero_next_to_a_live_row() -> None:
    rng = np.random.default_rng(5)
    keys, values = one_head_pages(2, 4, 8, rng)
    table = np.array([[-1, -1], [1, 0]], dtype=np.int32)
    out = paged_attention(rng.standard_normal((2, 1, 1, 8)), keys, values, table, np.array([0, 5]), 4)
    assert not out[0].any()
    assert np.abs(out[1]).sum() > 0


@pytest.mark.parametrize("mask", [None, "causal"])
def test_default_scale_is_inverse_sqrt_head_dim(mask: str | None) -> None:
    rng = np.random.default_rng(6)
    query, keys, values = (rng.standard_normal(s) for s in [(1, 1, 2, 16), (1, 1, 5, 16), (1, 1, 5, 16)])
    np.testing.assert_allclose(
        dense_attention(query, keys, values, mask=mask), dense_attention(query, keys, values, scale=0.25, mask=mask)
    )
    assert not np.allclose(dense_attention(query, keys, values, scale=1 / 16), dense_attention(query, keys, values))


def test_unknown_mask_is_rejected() -> None:
    with pytest.raises(NotImplementedError, match="mask"):
        visible_keys(3, 1, "sliding")
