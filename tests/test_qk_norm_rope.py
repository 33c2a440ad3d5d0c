"""The extension's qk_norm_rope: a Qwen3 layer's head split, q/k RMS norms and rotary embedding in one dispatch.

Checked on the CPU and on the GPU against a float64 NumPy computation of the
same math (one tolerance table, reference/tolerance.py) and against the MLX
operations it replaces in the serving model (mx.fast.rms_norm, then
mx.fast.rope), and for its rejections, which name the field and the value.
"""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np
import pytest

from pagecheck import ext
from pagecheck.reference.tolerance import compare

DTYPES = (mx.float32, mx.bfloat16, mx.float16)
EPS = 1e-6
BASE = 1_000_000.0
DEVICES = (
    pytest.param(mx.cpu, id="cpu"),
    pytest.param(mx.gpu, id="gpu", marks=(
        pytest.mark.gpu, pytest.mark.skipif(not mx.is_available(mx.gpu), reason="needs an MLX GPU device"))),
)
# (B, L, H_q, H_kv, D): a decode step, a prefill chunk, Qwen3-0.6B's heads, a head dim that is not a multiple of 64.
SHAPES = ((4, 1, 4, 2, 64), (2, 7, 4, 2, 64), (3, 2, 16, 8, 128), (2, 3, 2, 1, 40))


def inputs(batch: int, length: int, q_heads: int, kv_heads: int, head_dim: int, dtype: mx.Dtype, seed: int = 0):
    rng = np.random.default_rng([seed, batch, length, head_dim])
    qkv = mx.array(rng.standard_normal((batch, length, (q_heads + 2 * kv_heads) * head_dim)).astype(np.float32))
    q_norm = mx.array((1 + 0.1 * rng.standard_normal(head_dim)).astype(np.float32))
    k_norm = mx.array((1 + 0.1 * rng.standard_normal(head_dim)).astype(np.float32))
    offsets = mx.array(rng.integers(0, 40, batch), dtype=mx.int32)
    return qkv.astype(dtype), q_norm.astype(dtype), k_norm.astype(dtype), offsets


def float64_reference(qkv, q_norm, k_norm, offsets, q_heads: int, kv_heads: int):
    """q, k, v in float64 from the inputs' values, heads split and transposed to [B, H, L, D]."""
    x = np.array(qkv.astype(mx.float32), dtype=np.float64)
    batch, length, width = x.shape
    head_dim = width // (q_heads + 2 * kv_heads)
    heads = x.reshape(batch, length, -1, head_dim).transpose(0, 2, 1, 3)
    half = head_dim // 2
    positions = np.array(offsets, dtype=np.float64)[:, None] + np.arange(length)  # [B, L]
    angles = positions[:, None, :, None] * BASE ** (-np.arange(half) / half)  # [B, 1, L, half]
    cos, sin = np.cos(angles), np.sin(angles)

    def norm_rope(part: np.ndarray, weight) -> np.ndarray:
        w = np.array(weight.astype(mx.float32), dtype=np.float64)
        normed = part / np.sqrt(np.mean(part**2, axis=-1, keepdims=True) + EPS) * w
        a, c = normed[..., :half], normed[..., half:]
        return np.concatenate([a * cos - c * sin, a * sin + c * cos], axis=-1)

    return (norm_rope(heads[:, :q_heads], q_norm), norm_rope(heads[:, q_heads:q_heads + kv_heads], k_norm),
            heads[:, q_heads + kv_heads:])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}xL{}xHq{}xHkv{}xD{}".format(*s))
def test_matches_the_float64_reference(device: mx.Device, dtype: mx.Dtype, shape: tuple[int, ...]) -> None:
    batch, length, q_heads, kv_heads, head_dim = shape
    args = inputs(*shape, dtype)
    with mx.stream(device):
        q, k, v = ext.qk_norm_rope(*args, q_heads, kv_heads, EPS, BASE)
        mx.eval(q, k, v)
    want = float64_reference(*args, q_heads, kv_heads)
    assert q.shape == (batch, q_heads, length, head_dim) and k.shape == v.shape == (batch, kv_heads, length, head_dim)
    for name, got, expected in zip("qkv", (q, k, v), want):
        assert got.dtype == dtype
        result = compare(got, expected, dtype)
        assert result.passed, f"{name}: {result.summary()}"
    # v is the projection's own values, moved.
    assert np.array_equal(np.array(v.astype(mx.float32)), np.array(args[0].astype(mx.float32)).reshape(
        batch, length, -1, head_dim).transpose(0, 2, 1, 3)[:, q_heads + kv_heads:])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_no_less_accurate_than_mlx_norm_then_rope_at_long_positions(device: mx.Device, dtype: mx.Dtype) -> None:
    # The operations the serving model ran before the op, at positions of a 4k-token context. There a float32
    # angle is off by up to position x 2^-24 radians (4e-4 at position 4093, in MLX's rope as in the op), so
    # the bar is the replaced operations' own error against the float64 reference.
    batch, length, q_heads, kv_heads, head_dim = 3, 4, 16, 8, 128
    qkv, q_norm, k_norm, _ = inputs(batch, length, q_heads, kv_heads, head_dim, dtype, seed=1)
    offsets = mx.array([0, 2047, 4090], dtype=mx.int32)
    with mx.stream(device):
        q, k, _ = ext.qk_norm_rope(qkv, q_norm, k_norm, offsets, q_heads, kv_heads, EPS, BASE)
        heads = qkv.reshape(batch, length, -1, head_dim).transpose(0, 2, 1, 3)
        replaced = [
            mx.fast.rope(mx.fast.rms_norm(part, weight, EPS), head_dim, traditional=False, base=BASE, scale=1.0,
                         offset=offsets)
            for part, weight in ((heads[:, :q_heads], q_norm), (heads[:, q_heads:q_heads + kv_heads], k_norm))
        ]
        mx.eval(q, k, *replaced)
    want = float64_reference(qkv, q_norm, k_norm, offsets, q_heads, kv_heads)
    for name, got, old, expected in (("q", q, replaced[0], want[0]), ("k", k, replaced[1], want[1])):
        error = compare(got, expected, dtype).max_abs_error
        old_error = compare(old, expected, dtype).max_abs_error
        assert error <= 1.25 * old_error + 1e-6, f"{name}: max error {error:.3g}, MLX's operations {old_error:.3g}"


def test_one_graph_node_whose_outputs_are_row_contiguous() -> None:
    from pagecheck.bench.graph import graph_primitives

    qkv, q_norm, k_norm, offsets = inputs(2, 1, 4, 2, 64, mx.float32)
    mx.eval(qkv, q_norm, k_norm, offsets)
    q, k, v = ext.qk_norm_rope(qkv, q_norm, k_norm, offsets, 4, 2, EPS, BASE)
    # q, k and v are views the primitive sets itself: no Slice or Reshape nodes around it.
    assert all(graph_primitives(part) == {"QkNormRope": 1} for part in (q, k, v))
    # Reshapes of the decode-step layout need no copy: the three are contiguous slices of one buffer.
    for part in (q, k, v):
        assert mx.array_equal(part.reshape(-1), mx.array(np.array(part)).reshape(-1)).item()


def test_inside_mx_compile_equals_eager() -> None:
    qkv, q_norm, k_norm, offsets = inputs(3, 1, 4, 2, 64, mx.bfloat16)
    run = lambda *a: ext.qk_norm_rope(*a, 4, 2, EPS, BASE)  # noqa: E731
    eager = run(qkv, q_norm, k_norm, offsets)
    compiled = mx.compile(run)(qkv, q_norm, k_norm, offsets)
    for a, b in zip(eager, compiled):
        assert mx.array_equal(a, b).item()


def test_zero_rows_give_zero_not_nan() -> None:
    qkv, q_norm, k_norm, offsets = inputs(2, 2, 2, 1, 16, mx.float32)
    q, k, _ = ext.qk_norm_rope(mx.zeros_like(qkv), q_norm, k_norm, offsets, 2, 1, EPS, BASE)
    assert not mx.any(q != 0).item() and not mx.any(k != 0).item()



@pytest.mark.parametrize("device", DEVICES)
def test_every_output_element_is_written_over_recycled_nan_memory(device: mx.Device) -> None:
    # The GPU buffer is not filled before the kernel: its bytes are whatever MLX's cache hands back. Buffers of
    # the op's size are filled with NaN and freed first, so an element the kernel misses stays NaN.
    shape = (3, 2, 16, 8, 128)
    args = inputs(*shape, mx.bfloat16, seed=3)
    mx.eval(*args)
    want = float64_reference(*args, 16, 8)
    with mx.stream(device):
        for _ in range(4):
            poisoned = mx.full((args[0].size,), mx.nan, dtype=mx.bfloat16)
            mx.eval(poisoned)
            del poisoned
            q, k, v = ext.qk_norm_rope(*args, 16, 8, EPS, BASE)
            mx.eval(q, k, v)
            for name, got, expected in zip("qkv", (q, k, v), want):
                assert not mx.any(mx.isnan(got)).item(), f"{name} has elements the kernel did not write"
                result = compare(got, expected, mx.bfloat16)
                assert result.passed, f"{name}: {result.summary()}"
            del q, k, v

def good_arguments() -> dict:
    qkv, q_norm, k_norm, offsets = inputs(2, 3, 4, 2, 16, mx.float32)
    return dict(qkv=qkv, q_norm=q_norm, k_norm=k_norm, offsets=offsets, num_q_heads=4, num_kv_heads=2, eps=EPS,
                rope_base=BASE)


@pytest.mark.parametrize("change, match", [
    (dict(num_q_heads=0), "num_q_heads = 0 must be positive"),
    (dict(num_kv_heads=-1), "num_kv_heads = -1 must be positive"),
    (dict(qkv=mx.zeros((2, 3 * 128))), r"qkv must have 3 dimensions"),
    (dict(qkv=mx.zeros((2, 3, 100))), r"qkv.shape\[2\] = 100 must be \(H_q \+ 2 H_kv\) \* D = 8 \* D"),
    (dict(qkv=mx.zeros((2, 3, 8 * 15))), r"qkv.shape\[2\] = 120 .* even head dim"),
    (dict(qkv=mx.zeros((2, 3, 128), dtype=mx.int32)), "qkv dtype int32 is not supported"),
    (dict(q_norm=mx.ones((15,))), r"q_norm.shape\[0\] = 15 must equal head dim D = 16"),
    (dict(k_norm=mx.ones((16,), dtype=mx.float16)), "k_norm dtype float16 differs from qkv dtype float32"),
    (dict(offsets=mx.zeros((2,), dtype=mx.int64)), "offsets must be int32, got int64"),
    (dict(offsets=mx.zeros((3,), dtype=mx.int32)), r"offsets.shape\[0\] = 3 must equal batch B = 2"),
    (dict(eps=-1.0), r"eps = -1(\.0*)? must be finite and >= 0"),
    (dict(eps=math.nan), "eps = nan must be finite"),
    (dict(rope_base=1.0), r"rope_base = 1(\.0*)? must be finite and > 1"),
    (dict(rope_base=math.inf), "rope_base = inf must be finite"),
])
def test_rejections_name_the_field_and_value(change: dict, match: str) -> None:
    arguments = good_arguments() | change
    with pytest.raises(ValueError, match=match):
        ext.qk_norm_rope(**arguments)
