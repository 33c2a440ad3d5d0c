"""The extension's quantized_embedding equals mx.dequantize followed by take, bit for bit, on the CPU and on the GPU."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from pagecheck import ext
from pagecheck.serving.quantized import embedding_lookup, quantize_matrix

DTYPES = (mx.float32, mx.bfloat16, mx.float16)
GROUP_SIZES = (64, 128)
BITS = (4, 8)
VOCAB, DIMS = 37, 256


def table(dtype: mx.Dtype, group_size: int, bits: int, seed: int = 0):
    rng = np.random.default_rng([seed, group_size, bits])
    w = mx.array(rng.standard_normal((VOCAB, DIMS)).astype(np.float32)).astype(dtype)
    return quantize_matrix(w, group_size=group_size, bits=bits)


def expected_rows(matrix, ids: mx.array) -> mx.array:
    return mx.take(matrix.dequantize(), ids, axis=0)


def has_gpu() -> bool:
    return mx.is_available(mx.gpu)


# Each device's op against MLX's own dequantize on that device.
DEVICES = (
    pytest.param(mx.cpu, id="cpu"),
    pytest.param(mx.gpu, id="gpu", marks=(
        pytest.mark.gpu, pytest.mark.skipif(not has_gpu(), reason="needs an MLX GPU device"))),
)
# Rows of two requests for the cross-device checks, a repeated one among them.
CROSS_DEVICE_IDS = [[0, VOCAB - 1, 5, 5], [17, 2, 9, 30]]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("group_size", GROUP_SIZES)
@pytest.mark.parametrize("bits", BITS)
def test_rows_equal_dequantize_then_take(device: mx.Device, dtype: mx.Dtype, group_size: int, bits: int) -> None:
    matrix = table(dtype, group_size, bits)
    ids = mx.array([[0, VOCAB - 1, 5], [5, 17, 2]], dtype=mx.int32)
    with mx.stream(device):
        got = embedding_lookup(ids, matrix)
        expected = expected_rows(matrix, ids)
    assert got.shape == (2, 3, DIMS) and got.dtype == dtype
    mismatches = int(mx.sum(got != expected).item())
    assert mismatches == 0, f"{mismatches} of {got.size} values differ from MLX's dequantize on {device}"


def test_lazy_ids_and_repeated_rows() -> None:
    matrix = table(mx.float32, 64, 4)
    ids = (mx.arange(12, dtype=mx.int32) * 7) % VOCAB  # computed inside the graph
    assert mx.array_equal(embedding_lookup(ids, matrix), expected_rows(matrix, ids)).item()


def test_scalar_and_empty_ids_keep_their_shape() -> None:
    matrix = table(mx.float32, 64, 4)
    assert embedding_lookup(mx.array(3), matrix).shape == (DIMS,)
    assert embedding_lookup(mx.zeros((0, 4), dtype=mx.int32), matrix).shape == (0, 4, DIMS)


def test_ready_id_out_of_range_is_a_value_error() -> None:
    # On the CPU stream ids are read at the call (see ext/src/common/ready_inputs.h).
    matrix = table(mx.float32, 64, 4)
    with mx.stream(mx.cpu), pytest.raises(ValueError, match=rf"ids\[1\] = {VOCAB} is not a row"):
        embedding_lookup(mx.array([0, VOCAB], dtype=mx.int32), matrix)


def test_lazy_id_out_of_range_is_a_value_error_at_the_call() -> None:
    matrix = table(mx.float32, 64, 4)
    lazy = mx.add(mx.array([1, -2], dtype=mx.int32), 0, stream=mx.cpu)  # not computed yet
    with mx.stream(mx.cpu), pytest.raises(ValueError, match=r"ids\[1\] = -2"):
        embedding_lookup(lazy, matrix)


def test_traced_id_out_of_range_raises_in_the_task() -> None:
    # Under mx.compile the ids are tracers at the call: the CPU task checks them before reading a row, and MLX
    # raises the task's error as RuntimeError at evaluation.
    matrix = table(mx.float32, 64, 4)

    def lookup(ids: mx.array) -> mx.array:
        return ext.quantized_embedding(ids, matrix.weight, matrix.scales, matrix.biases, matrix.group_size,
                                       matrix.bits, stream=mx.cpu)

    with pytest.raises(RuntimeError, match=rf"ids\[2\] = {VOCAB + 3} is not a row of the table \[0, {VOCAB}\)"):
        mx.eval(mx.compile(lookup)(mx.array([0, 1, VOCAB + 3], dtype=mx.int32)))


BAD_CALLS = {
    "bits": (dict(bits=3), "bits = 3"),
    "group size": (dict(group_size=48), "group_size = 48"),
    "float ids": (dict(ids=mx.array([1.0])), "ids must be int32"),
    "unpacked weight": (dict(weight_dtype=mx.int32), "weight must be uint32"),
    "wrong groups": (dict(group_size=128), r"scales.shape\[1\] = 4 must equal"),
}


@pytest.mark.parametrize("case", BAD_CALLS, ids=list(BAD_CALLS))
def test_bad_arguments_raise_value_error_naming_the_field(case: str) -> None:
    matrix = table(mx.float32, 64, 4)
    change, message = BAD_CALLS[case]
    weight = matrix.weight.astype(change["weight_dtype"]) if "weight_dtype" in change else matrix.weight
    with pytest.raises(ValueError, match=message):
        ext.quantized_embedding(
            change.get("ids", mx.array([1], dtype=mx.int32)), weight, matrix.scales, matrix.biases,
            change.get("group_size", matrix.group_size), change.get("bits", matrix.bits),
        )


# Unit roundoff of each dtype: half the distance from 1 to the next value.
UNIT_ROUNDOFF = {mx.float32: 2.0**-24, mx.bfloat16: 2.0**-8, mx.float16: 2.0**-11}


@pytest.mark.gpu
@pytest.mark.skipif(not has_gpu(), reason="needs an MLX GPU device")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("group_size", GROUP_SIZES)
@pytest.mark.parametrize("bits", BITS)
def test_gpu_kernel_matches_cpu(dtype: mx.Dtype, group_size: int, bits: int) -> None:
    matrix = table(dtype, group_size, bits)
    ids = mx.array(CROSS_DEVICE_IDS, dtype=mx.int32)
    args = (ids, matrix.weight, matrix.scales, matrix.biases, group_size, bits)
    on_gpu = ext.quantized_embedding(*args, stream=mx.gpu)
    on_cpu = ext.quantized_embedding(*args, stream=mx.cpu)
    within_rounding(on_gpu, on_cpu, matrix, ids, dtype, bits)


def within_rounding(a: mx.array, b: mx.array, matrix, ids: mx.array, dtype: mx.Dtype, bits: int) -> None:
    """a and b are two roundings of level * scale + bias: the CPU rounds the product to the dtype, then the
    sum; the GPU rounds the exact sum once. Where the product nearly cancels the bias, the first rounding's
    error is relative to the product, not to the result, so the bound is one unit roundoff of the
    largest product of the group plus two of the result."""
    groups = mx.take(matrix.scales, ids, axis=0).astype(mx.float32)  # [..., groups per row]
    largest_product = mx.repeat(mx.abs(groups) * (2**bits - 1), matrix.group_size, axis=-1)
    result = mx.maximum(mx.abs(a.astype(mx.float32)), mx.abs(b.astype(mx.float32)))
    bound = UNIT_ROUNDOFF[dtype] * (largest_product + 2 * result)
    diff = mx.abs(a.astype(mx.float32) - b.astype(mx.float32))
    over = int(mx.sum(diff > bound).item())
    assert over == 0, f"{over} values differ by more than the rounding bound (largest {mx.max(diff).item()})"


def test_the_cross_device_bound_takes_a_cancelling_product_and_refuses_a_wrong_level() -> None:
    # The CPU op's order (product rounded first) against the exact sum rounded once, both computed here.
    dtype, group_size, bits = mx.float16, 64, 4
    matrix = table(dtype, group_size, bits)
    ids = mx.array(CROSS_DEVICE_IDS, dtype=mx.int32)
    # The CPU op's order on any machine: on a GPU machine the default device would compute the other one.
    with mx.stream(mx.cpu):
        two_roundings = ext.quantized_embedding(ids, matrix.weight, matrix.scales, matrix.biases, group_size, bits)
        mx.eval(two_roundings)
    levels = np.asarray(mx.take(mx.dequantize(matrix.weight, mx.ones_like(matrix.scales).astype(mx.float32),
                                              mx.zeros_like(matrix.biases).astype(mx.float32),
                                              group_size=group_size, bits=bits), ids, axis=0))
    scales = np.repeat(np.asarray(mx.take(matrix.scales, ids, axis=0).astype(mx.float32)), group_size, axis=-1)
    biases = np.repeat(np.asarray(mx.take(matrix.biases, ids, axis=0).astype(mx.float32)), group_size, axis=-1)
    exact = levels.astype(np.float64) * scales + biases
    one_rounding = mx.array(exact.astype(np.float16))
    assert int(mx.sum(one_rounding != two_roundings).item()) > 0  # the two orders do differ somewhere
    within_rounding(one_rounding, two_roundings, matrix, ids, dtype, bits)
    wrong = mx.array((exact + scales).astype(np.float16))  # one quantization level off
    with pytest.raises(AssertionError, match="differ by more than the rounding bound"):
        within_rounding(wrong, two_roundings, matrix, ids, dtype, bits)
