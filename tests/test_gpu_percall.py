"""The per-call wall table (pagecheck.gpu.percall) measures what it says, on the CPU where CI runs it."""

from __future__ import annotations

from collections.abc import Iterator

import mlx.core as mx
import numpy as np
import pytest

from pagecheck.gpu import percall
from pagecheck.reference.attention import paged_attention as reference_paged_attention
from pagecheck.reference.tolerance import compare


@pytest.fixture(autouse=True)
def on_the_cpu() -> Iterator[None]:
    previous = mx.default_device()
    mx.set_default_device(mx.cpu)
    yield
    mx.set_default_device(previous)


@pytest.mark.parametrize("chained", [False, True])
def test_chained_calls_take_the_previous_output_and_independent_calls_the_query(chained: bool) -> None:
    query = mx.zeros((1, 2, 1, 4))
    seen: list[mx.array] = []

    def call(q: mx.array) -> mx.array:
        seen.append(q)
        return q + 1

    percall.time_back_to_back(call, query, calls=3, chained=chained)
    if chained:
        assert [int(q[0, 0, 0, 0]) for q in seen] == [0, 1, 2]
    else:
        assert all(q is query for q in seen)


def test_a_measurement_has_every_variant_in_both_modes_and_a_verdict() -> None:
    rows = percall.measure(1, 2 * percall.PAGE_SIZE, calls=2, repeats=1)
    assert {row.variant for row in rows} == {percall.PAGED, "paged[op]", percall.BASELINE}
    assert all(row.wall_us > 0 and row.chained_us > 0 for row in rows)
    document = {"calls": 2, "repeats": 1, "rows": [row.__dict__ for row in rows]}
    document["goals"] = percall.judge(document["rows"])
    (verdict,) = document["goals"]
    assert verdict["ratio"] == pytest.approx(verdict["paged_us"] / verdict["sdpa_us"])
    table = percall.render(document)
    assert "chained us" in table
    assert table.count(f"| 1 | {2 * percall.PAGE_SIZE} |") == 4  # three variants and the verdict


def test_every_variant_computes_the_attention_it_times() -> None:
    inputs = percall.make_inputs(2, 2 * percall.PAGE_SIZE)
    want = reference_paged_attention(
        *(np.array(a.astype(mx.float32)) for a in (inputs.query, inputs.key_pages, inputs.value_pages)),
        np.array(inputs.block_table), np.array(inputs.context_lens), percall.PAGE_SIZE, percall.HEAD_DIM**-0.5,
    )
    for name, call in percall.variants(inputs).items():
        result = compare(call(inputs.query), want, "bfloat16")
        assert result.passed, f"{name}: {result.summary()}"
