"""The extension's paged and dense attention agree with the float64 reference.

Cases sample the grid (dtype x head dim x page size x query length x GQA
ratio x mask) so every value of every axis appears without taking the full
product. Layouts come from reference/layouts.py: shuffled, non-contiguous
block tables with NaN in every slot no request owns.
"""

from __future__ import annotations

import numpy as np
import pytest

from pagecheck import ext
import mlx.core as mx
from pagecheck.impl.attention import paged_attention
from pagecheck.impl.page_gather import gather_pages_dense
from pagecheck.reference.attention import dense_attention, gather_dense
from pagecheck.reference.layouts import DTYPES, random_layout
from pagecheck.reference.tolerance import compare

HEAD_DIMS = (32, 64, 128)
PAGE_SIZES = (1, 3, 16, 128)
QUERY_LENS = (1, 4, 8, 9, 65)
GQA_RATIOS = (1, 2, 4)
MASKS = (None, "causal")
NUM_SAMPLED_CASES = 24
AXES = (DTYPES, HEAD_DIMS, PAGE_SIZES, QUERY_LENS, GQA_RATIOS, MASKS)


def sampled_cases(count: int) -> list[tuple]:
    """`count` cases; each axis column cycles through its values in a seeded shuffle, so every value appears."""
    rng = np.random.default_rng(2024)
    columns = [rng.permutation(np.resize(np.arange(len(axis)), count)) for axis in AXES]
    return [tuple(axis[column[i]] for axis, column in zip(AXES, columns)) for i in range(count)]


def contexts_for(page_size: int, num_queries: int, rng: np.random.Generator) -> list[int]:
    """A zero context, a context equal to L, one that ends mid-page, one that spans pages."""
    spanning = min(page_size * 3 + 1, 300) + num_queries
    return [0, num_queries, int(rng.integers(num_queries, num_queries + 2 * page_size + 2)), spanning]


@pytest.mark.parametrize("dtype, head_dim, page_size, num_queries, ratio, mask", sampled_cases(NUM_SAMPLED_CASES))
def test_paged_matches_float64_reference(
    dtype: str, head_dim: int, page_size: int, num_queries: int, ratio: int, mask: str | None
) -> None:
    rng = np.random.default_rng([head_dim, page_size, num_queries, ratio])
    layout = random_layout(
        rng, context_lens=contexts_for(page_size, num_queries, rng), page_size=page_size,
        num_queries=num_queries, num_q_heads=2 * ratio, num_kv_heads=2, head_dim=head_dim, dtype=dtype, mask=mask,
    )
    result = compare(paged_attention(**layout.as_mx()), layout.reference_output(), dtype)
    assert result.passed, f"{layout.describe()}\n{result.summary()}"


def test_sampled_cases_cover_every_axis_value() -> None:
    cases = sampled_cases(NUM_SAMPLED_CASES)
    for axis_idx, axis in enumerate(AXES):
        assert {case[axis_idx] for case in cases} == set(axis), axis


@pytest.mark.parametrize("num_queries, mask", [(1, None), (8, "causal"), (65, "causal"), (12, None)])
def test_threaded_schedules_match_reference(num_queries: int, mask: str | None) -> None:
    # Contexts long enough that the decode schedule splits them into several
    # chunks and both schedules run on the worker pool.
    rng = np.random.default_rng(num_queries)
    layout = random_layout(
        rng, context_lens=[1100, 0, 700 + num_queries], page_size=16, num_queries=num_queries,
        num_q_heads=8, num_kv_heads=2, head_dim=128, dtype="bfloat16", mask=mask,
    )
    result = compare(paged_attention(**layout.as_mx()), layout.reference_output(), "bfloat16")
    assert result.passed, f"{layout.describe()}\n{result.summary()}"


def test_explicit_scale_is_used() -> None:
    rng = np.random.default_rng(11)
    layout = random_layout(rng, context_lens=[20, 7], page_size=3, num_queries=2, head_dim=32, mask="causal")
    got = paged_attention(**layout.as_mx(), scale=0.3)
    result = compare(got, layout.reference_output(scale=0.3), "float32")
    assert result.passed, result.summary()


def test_context_zero_gives_exact_zeros() -> None:
    rng = np.random.default_rng(12)
    layout = random_layout(rng, context_lens=[0, 5], page_size=4, num_queries=1)
    out = np.array(paged_attention(**layout.as_mx()))
    assert not out[0].any()
    assert np.isfinite(out).all()


def test_large_logits_stay_finite() -> None:
    rng = np.random.default_rng(13)
    layout = random_layout(rng, context_lens=[70, 33], page_size=16, num_queries=4, mask="causal", logit_scale=30.0)
    result = compare(paged_attention(**layout.as_mx()), layout.reference_output(), "float32")
    assert result.passed, result.summary()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("num_queries, mask", [(1, None), (5, "causal"), (20, "causal")])
def test_dense_op_matches_float64_reference(dtype: str, num_queries: int, mask: str | None) -> None:
    rng = np.random.default_rng([num_queries, len(dtype)])
    layout = random_layout(
        rng, context_lens=[num_queries + 40, 0, num_queries + 3], page_size=8, num_queries=num_queries,
        num_q_heads=4, num_kv_heads=2, head_dim=64, dtype=dtype, mask=mask,
    )
    inputs = layout.as_mx()
    keys = gather_pages_dense(inputs["key_pages"], inputs["block_table"])
    values = gather_pages_dense(inputs["value_pages"], inputs["block_table"])
    got = ext.dense_attention(inputs["query"], keys, values, None, mask == "causal", inputs["context_lens"])
    dense_k, dense_v = gather_dense(layout.key_pages, layout.value_pages, layout.block_table, layout.context_lens, 8)
    want = dense_attention(layout.query, dense_k, dense_v, mask=mask, context_lens=layout.context_lens)
    result = compare(got, want, dtype)
    assert result.passed, f"{layout.describe()}\n{result.summary()}"


def test_dense_op_without_context_lens_uses_every_key() -> None:
    rng = np.random.default_rng(14)
    query, keys, values = (rng.standard_normal(s).astype(np.float32) for s in [(2, 4, 3, 32), (2, 1, 9, 32), (2, 1, 9, 32)])
    got = ext.dense_attention(mx.array(query), mx.array(keys), mx.array(values), 0.2, True)
    result = compare(got, dense_attention(query, keys, values, scale=0.2, mask="causal"), "float32")
    assert result.passed, result.summary()


def test_query_dtype_is_kept_when_kv_dtype_differs() -> None:
    # The op promotes the query to the K/V storage dtype and returns the query dtype.
    rng = np.random.default_rng(15)
    layout = random_layout(rng, context_lens=[9], page_size=4, num_queries=1, dtype="bfloat16")
    inputs = layout.as_mx()
    got = ext.paged_attention(
        inputs["query"].astype(mx.float32), inputs["key_pages"], inputs["value_pages"],
        inputs["block_table"], inputs["context_lens"], 4,
    )
    assert got.dtype == mx.float32
    assert compare(got, layout.reference_output(), "bfloat16").passed


def test_compile_keeps_calls_with_different_parameters_apart() -> None:
    # mx.compile merges equal primitives on equal inputs; is_equivalent must
    # tell different scales and masks apart or the two calls collapse into one.
    rng = np.random.default_rng(16)
    layout = random_layout(rng, context_lens=[12, 6], page_size=4, num_queries=2)
    inputs = layout.as_mx()
    args = (inputs["query"], inputs["key_pages"], inputs["value_pages"], inputs["block_table"], inputs["context_lens"])

    def two_calls(*arrays: mx.array) -> tuple[mx.array, mx.array, mx.array]:
        return (
            ext.paged_attention(*arrays, 4, 0.1, False),
            ext.paged_attention(*arrays, 4, 0.9, False),
            ext.paged_attention(*arrays, 4, 0.1, True),
        )

    eager = two_calls(*args)
    compiled = mx.compile(two_calls)(*args)
    for eager_out, compiled_out in zip(eager, compiled):
        np.testing.assert_array_equal(np.array(eager_out), np.array(compiled_out))
    assert not np.allclose(np.array(eager[0]), np.array(eager[1]))


def test_shapeless_compile_uses_output_shapes() -> None:
    rng = np.random.default_rng(17)

    def attend(query: mx.array, key: mx.array, value: mx.array) -> mx.array:
        return ext.dense_attention(query, key, value, None, False)

    compiled = mx.compile(attend, shapeless=True)
    for batch in (1, 3):
        query, key, value = (
            mx.array(rng.standard_normal(s).astype(np.float32)) for s in [(batch, 2, 1, 16), (batch, 1, 5, 16), (batch, 1, 5, 16)]
        )
        got = compiled(query, key, value)
        assert got.shape == (batch, 2, 1, 16)
        np.testing.assert_allclose(np.array(got), np.array(attend(query, key, value)), rtol=1e-6, atol=1e-6)


def test_build_info_names_flags_and_versions() -> None:
    info = ext.build_info()
    assert info["march"] in ("native", "default")
    assert "-fno-math-errno" in info["kernel_flags"]
    assert "-ffast-math" not in info["kernel_flags"]
    assert info["mlx_version_built"] == info["mlx_version_runtime"] == mx.__version__
    assert info["num_threads"] >= 1


def test_two_cpu_streams_share_the_worker_pool_without_deadlock() -> None:
    # Both stream threads reach the pool at once: one gets the workers, the
    # other runs its items inline; both results must be right.
    rng = np.random.default_rng(18)
    layout = random_layout(
        rng, context_lens=[1500, 900], page_size=32, num_queries=1, num_q_heads=8, num_kv_heads=2, head_dim=128,
        dtype="bfloat16",
    )
    inputs = layout.as_mx()
    del inputs["mask"]
    streams = [mx.new_stream(mx.cpu), mx.new_stream(mx.cpu)]
    outputs = [
        ext.paged_attention(*inputs.values(), None, False, stream=stream) for stream in streams for _ in range(3)
    ]
    mx.eval(outputs)
    want = layout.reference_output()
    for out in outputs:
        assert compare(out, want, "bfloat16").passed


def test_a_bad_warpgroup_image_format_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    # Checked before any compile, so on every machine.
    monkeypatch.setenv("PAGECHECK_WGMMA_IMAGE", "sass")
    with pytest.raises(ValueError, match="PAGECHECK_WGMMA_IMAGE='sass' must be cubin or ptx"):
        ext.gpu_prefill_wgmma_kernel("bfloat16", 128, 128, 2, 2, True, 0, 0x3DB504F3, False)


@pytest.mark.parametrize("value, reuse", [(None, False), ("", False), ("0", False), ("1", True)])
def test_kernel_node_reuse_is_off_unless_asked(monkeypatch: pytest.MonkeyPatch, value: str | None,
                                                reuse: bool) -> None:
    if value is None:
        monkeypatch.delenv("PAGECHECK_REUSE_KERNEL_NODES", raising=False)
    else:
        monkeypatch.setenv("PAGECHECK_REUSE_KERNEL_NODES", value)
    assert ext.reuse_kernel_nodes() is reuse


def test_a_bad_kernel_node_reuse_value_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAGECHECK_REUSE_KERNEL_NODES", "yes")
    with pytest.raises(ValueError, match="PAGECHECK_REUSE_KERNEL_NODES='yes' must be 0 or 1"):
        ext.reuse_kernel_nodes()
