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
    # Untraced (no GPU clock here), the GPU columns say so instead of inventing a figure.
    assert all(row.gpu_busy_us is None and row.most_at_once is None for row in rows)
    assert table.count("| - | - |") == 3


def test_a_traced_measurement_reports_what_the_trace_saw(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = 2
    ran: list[int] = []

    def fake_events(run):  # two calls' kernels; the second call's started inside the first's
        before = len(ran)
        run()
        ran.append(before)
        return [("k", 0.0, 10.0), ("k", 4.0, 14.0)]

    monkeypatch.setattr(percall.gpu_clock, "kernel_events", fake_events)
    rows = percall.measure(1, percall.PAGE_SIZE, calls=calls, repeats=1, trace=True)
    assert len(ran) == 3  # one traced evaluation a variant
    for row in rows:
        assert row.gpu_busy_us == pytest.approx(20.0 / calls)
        assert row.gpu_occupied_us == pytest.approx(14.0 / calls)
        assert row.most_at_once == 2
    document = {"calls": calls, "repeats": 1, "rows": [row.__dict__ for row in rows]}
    document["goals"] = percall.judge(document["rows"])
    assert percall.render(document).count("| 10.0 / 7.0 | 2 |") == 3


def test_a_trace_that_saw_no_kernel_reports_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(percall.gpu_clock, "kernel_events", lambda run: (run(), [])[1])
    found = percall.trace_back_to_back(lambda q: q + 1, mx.zeros((1, 1, 1, 4)), calls=2)
    assert found == {"gpu_busy_us": None, "gpu_occupied_us": None, "most_at_once": None}


def reference_for(query: mx.array, s: percall.InputSet) -> np.ndarray:
    """The float64 reference of `query` over set `s`'s pages."""
    return reference_paged_attention(
        *(np.array(a.astype(mx.float32)) for a in (query, s.key_pages, s.value_pages)),
        np.array(s.block_table), np.array(s.context_lens), percall.PAGE_SIZE, percall.HEAD_DIM**-0.5,
    )


def test_every_variant_computes_the_attention_it_times() -> None:
    inputs = percall.make_inputs(2, 2 * percall.PAGE_SIZE)
    want = reference_for(inputs.query, inputs)
    for name, call in percall.variants(inputs).items():
        result = compare(call(inputs.query), want, "bfloat16")
        assert result.passed, f"{name}: {result.summary()}"


def test_pinned_split_counts_add_launcher_variants_and_no_goal() -> None:
    inputs = percall.make_inputs(1, percall.PAGE_SIZE)
    names = list(percall.variants(inputs, pinned_splits=(1, 2)))
    assert names[:2] == ["launcher[splits=1]", "launcher[splits=2]"]
    assert set(names[2:]) == {percall.PAGED, "paged[op]", percall.BASELINE}
    rows = [{"batch": 1, "context": 128, "variant": name, "wall_us": 1.0} for name in names]
    (verdict,) = percall.judge(rows)  # the goal still compares paged with MLX SDPA only
    assert verdict["ratio"] == pytest.approx(1.0)


MOST_SPLITS = int(percall.ext.gpu_plan_constants()["max_splits"])


@pytest.mark.parametrize("text, message", [("0", f"pin-splits='0' must be in 1..{MOST_SPLITS}; 0 is not"),
                                           ("1,x", "pin-splits='1,x' must be comma-separated integers"),
                                           (f"1,{MOST_SPLITS + 1}",
                                            f"must be in 1..{MOST_SPLITS}; {MOST_SPLITS + 1} is not")])
def test_bad_split_counts_are_named(text: str, message: str) -> None:
    with pytest.raises(percall.argparse.ArgumentTypeError, match=message):
        percall.split_counts("pin-splits")(text)
    assert percall.split_counts("pin-splits")("2,1,2") == (2, 1)


def test_pinned_splits_refuse_the_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        percall.main(["--cpu", "--pin-splits", "1"])
    assert exited.value.code == 2
    assert "needs the GPU" in capsys.readouterr().err


def test_shapes_option_takes_batch_by_context(capsys: pytest.CaptureFixture[str]) -> None:
    assert percall.main(["--cpu", "--shapes", "1x256", "--calls", "2", "--repeats", "1"]) == 0
    table = capsys.readouterr().out
    assert "| 1 | 256 | paged |" in table and "| 16 | 1024 |" not in table
    with pytest.raises(SystemExit):
        percall.main(["--cpu", "--shapes", "1x100"])


def test_rotating_calls_take_turns() -> None:
    seen: list[str] = []
    call = percall.rotating([lambda q: seen.append("a") or q, lambda q: seen.append("b") or q,
                             lambda q: seen.append("c") or q])
    for _ in range(7):
        call(mx.zeros((1,)))
    assert seen == ["a", "b", "c", "a", "b", "c", "a"]


def test_distinct_kv_calls_each_read_their_own_set_and_compute_its_attention(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(percall, "set_count", lambda kv_bytes: 3)
    first = percall.make_inputs(2, 2 * percall.PAGE_SIZE)
    calls = percall.distinct_kv_variants(first, 2, 2 * percall.PAGE_SIZE)
    assert set(calls) == {percall.PAGED + percall.DISTINCT, percall.BASELINE + percall.DISTINCT}
    sets = [first] + [percall.make_inputs(2, 2 * percall.PAGE_SIZE, seed) for seed in (1, 2)]
    for name, call in calls.items():
        for turn in range(4):  # the fourth call is the first set's again
            # every call takes the first set's query, over its own set's K/V
            result = compare(call(first.query), reference_for(first.query, sets[turn % 3]), "bfloat16")
            assert result.passed, f"{name}, call {turn}: {result.summary()}"


def test_distinct_kv_rows_are_shown_beside_the_goal_and_not_judged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(percall, "set_count", lambda kv_bytes: 2)
    document = percall.run_percall(((1, percall.PAGE_SIZE),), calls=2, repeats=1, distinct_kv=True)
    variants = {row["variant"] for row in document["rows"]}
    assert variants == {percall.PAGED, "paged[op]", percall.BASELINE, "paged[distinct K/V]", "mlx_sdpa[distinct K/V]"}
    (verdict,) = document["goals"]  # the goal compares the same-K/V rows only
    same = {row["variant"]: row["wall_us"] for row in document["rows"]}
    assert verdict["ratio"] == pytest.approx(same[percall.PAGED] / same[percall.BASELINE])
    table = percall.render(document)
    ratio = same["paged[distinct K/V]"] / same["mlx_sdpa[distinct K/V]"]
    assert "Each call on other K/V than its neighbours" in table
    assert f"| 1 | {percall.PAGE_SIZE} | {same['paged[distinct K/V]']:.1f} | " \
           f"{same['mlx_sdpa[distinct K/V]']:.1f} | {ratio:.2f} |" in table
