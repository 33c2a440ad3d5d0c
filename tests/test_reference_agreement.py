"""The two oracles agree: float64 NumPy and readable mlx.core, on random shuffled layouts."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from pagecheck.reference import attention_mx
from pagecheck.reference.layouts import DTYPES, random_layout
from pagecheck.reference.tolerance import compare


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask", [None, "causal"])
@pytest.mark.parametrize("page_size, num_queries, group", [(1, 1, 1), (3, 4, 2), (16, 9, 4), (5, 2, 8)])
def test_mlx_oracle_matches_float64(dtype: str, mask: str | None, page_size: int, num_queries: int, group: int) -> None:
    rng = np.random.default_rng([page_size, num_queries, group])
    contexts = [0, num_queries, page_size * 2, page_size * 2 + 1 + num_queries]
    layout = random_layout(
        rng, context_lens=contexts, page_size=page_size, num_queries=num_queries,
        num_q_heads=2 * group, num_kv_heads=2, head_dim=16, dtype=dtype, mask=mask,
    )
    # The CPU stream: this checks the oracle's equation. On CUDA, MLX may run
    # float32 matmuls in TF32 (seen on the H200: errors near 1e-3).
    with mx.stream(mx.cpu):
        got = attention_mx.paged_attention(**layout.as_mx())
    result = compare(got, layout.reference_output(), dtype)
    assert result.passed, f"{layout.describe()}\n{result.summary()}"
