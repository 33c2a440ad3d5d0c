"""pagecheck.serving.quantized.quantized_linear: x @ W.T for affine-quantized W, on whichever device is the default.

Checked against float64 NumPy of the dequantized weights. Rows that are a single quantization group
(cols == group_size) take the dequantize-then-matmul route, because MLX 0.32.4's CUDA quantized matmul
returned wrong values for them (impl/quantized.py); the others take mx.quantized_matmul.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

import pagecheck.serving.quantized
from pagecheck.serving.quantized import quantize_matrix, quantized_linear

# (rows, cols, group_size): single-group rows first, then shapes with 2 and 4 groups per row.
SHAPES = ((64, 64, 64), (128, 128, 128), (64, 64, 32), (128, 256, 64))


def case(rows: int, cols: int, group_size: int, batch_rows: int, seed: int = 0):
    rng = np.random.default_rng([seed, rows, cols, group_size, batch_rows])
    matrix = quantize_matrix(mx.array(rng.standard_normal((rows, cols)).astype(np.float32) * 0.1),
                             group_size=group_size)
    x = rng.standard_normal((1, batch_rows, cols)).astype(np.float32)
    want = x.astype(np.float64) @ np.array(matrix.dequantize()).astype(np.float64).T
    return matrix, x, want


@pytest.mark.parametrize("rows,cols,group_size", SHAPES)
@pytest.mark.parametrize("batch_rows", (1, 2, 9))
def test_matches_float64_of_the_dequantized_weights(rows: int, cols: int, group_size: int, batch_rows: int) -> None:
    matrix, x, want = case(rows, cols, group_size, batch_rows)
    got = np.array(quantized_linear(mx.array(x), matrix))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("rows,cols,group_size", SHAPES)
def test_only_multi_group_rows_reach_quantized_matmul(rows: int, cols: int, group_size: int, monkeypatch) -> None:
    calls = []
    real = mx.quantized_matmul

    def spy(*args, **kwargs):
        calls.append(kwargs.get("group_size"))
        return real(*args, **kwargs)

    monkeypatch.setattr(pagecheck.serving.quantized.mx, "quantized_matmul", spy)
    matrix, x, _ = case(rows, cols, group_size, 2)
    mx.eval(quantized_linear(mx.array(x), matrix))
    assert calls == ([] if cols == group_size else [group_size])
