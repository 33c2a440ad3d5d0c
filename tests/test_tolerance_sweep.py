"""The tolerance sweep passes exact subjects and names the cells where a subject drifts or raises."""

from __future__ import annotations

import json

import mlx.core as mx
import pytest

from pagecheck.bench.tolerance_sweep import SweepGrid, run_sweep
from pagecheck.reference import attention_mx

@pytest.fixture(autouse=True)
def on_the_cpu_stream():
    """The subjects here wrap the mlx.core oracle, whose float32 matmuls may run in TF32 on CUDA."""
    with mx.stream(mx.cpu):
        yield


TINY_GRID = SweepGrid(dtypes=("float32", "bfloat16"), head_dims=(32,), page_sizes=(4,), query_lens=(1, 3), contexts=(2, 9))


def off_by_one_context(query, key_pages, value_pages, block_table, context_lens, page_size, scale=None, mask=None):
    """Drops the newest key of every request: the classic context-length bug."""
    return attention_mx.paged_attention(query, key_pages, value_pages, block_table, context_lens - 1, page_size, scale, mask)


def raises_on_bfloat16(query, key_pages, value_pages, block_table, context_lens, page_size, scale=None, mask=None):
    if query.dtype == mx.bfloat16:
        raise ValueError("query dtype=bfloat16 is not supported")
    return attention_mx.paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale, mask)


def test_grid_skips_contexts_shorter_than_the_query() -> None:
    cells = list(TINY_GRID.cells())
    assert all(cell.context >= cell.query_len for cell in cells)
    assert len(cells) == 2 * 3  # (L=1: contexts 2, 9; L=3: context 9) per dtype


def test_the_mlx_oracle_passes_every_cell_and_the_document_is_json() -> None:
    body = run_sweep(attention_mx.paged_attention, TINY_GRID, seed=3)
    assert body["passed"], [row for row in body["rows"] if not row["passed"]]
    assert body["totals"] == {"rows": 6, "passed": 6, "failed": 0, "errors": 0, "declined": 0}
    json.dumps(body, allow_nan=False)


def test_a_context_bug_fails_with_its_distance_recorded() -> None:
    body = run_sweep(off_by_one_context, TINY_GRID, seed=3)
    assert not body["passed"]
    for row in body["rows"]:
        assert not row["passed"], row
        assert row["vs_reference"]["allowance_used"] > 1
        assert row["vs_reference"]["first_mismatches"]


def test_an_exception_becomes_a_failing_row_not_a_crash() -> None:
    body = run_sweep(raises_on_bfloat16, TINY_GRID, seed=3)
    failed = [row for row in body["rows"] if not row["passed"]]
    assert {row["dtype"] for row in failed} == {"bfloat16"}
    assert all("bfloat16 is not supported" in row["error"] for row in failed)
    assert body["totals"]["errors"] == len(failed) == 3


class SubjectQuit(BaseException):
    """Not an Exception: what a subject's own BaseException subclass looks like to the sweep."""


@pytest.mark.parametrize("raised", [SystemExit(0), SubjectQuit("stop")], ids=["sys.exit", "BaseException"])
def test_a_subject_that_raises_past_exception_fails_its_cells_and_the_sweep_goes_on(raised: BaseException) -> None:
    """sys.exit(0) inside a call ended the sweep (and the command, with no report)."""

    def quits(*args, **kwargs):
        raise raised

    body = run_sweep(quits, TINY_GRID, seed=3)
    assert body["totals"]["errors"] == body["totals"]["rows"] == 6 and not body["passed"]
    assert all(row["error"].startswith(type(raised).__name__) for row in body["rows"])


def test_a_subjects_own_keyboard_interrupt_fails_its_cells_under_the_commands_handler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under pagecheck's signal handler a KeyboardInterrupt the subject raises is the subject's failure (it read
    as the user's Ctrl-C: the command stopped with exit 130); the handler's own interrupt still stops the sweep."""
    import signal

    from pagecheck.cli import _Interrupt
    from pagecheck.invariants.subject import UserInterrupt

    def interrupts(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(signal, "getsignal", lambda signum: _Interrupt())
    body = run_sweep(interrupts, TINY_GRID, seed=3)
    assert body["totals"]["errors"] == body["totals"]["rows"] == 6 and not body["passed"]
    assert all(row["error"].startswith("KeyboardInterrupt") for row in body["rows"])

    def stopped(*args, **kwargs):
        raise UserInterrupt("SIGINT")

    with pytest.raises(KeyboardInterrupt):
        run_sweep(stopped, TINY_GRID, seed=3)


@pytest.mark.parametrize("then", ["returns", "raises"])
def test_an_interrupt_the_subject_swallows_still_stops_the_sweep(monkeypatch: pytest.MonkeyPatch, then: str) -> None:
    """Ctrl-C is raised in whatever frame runs, often the subject's: one whose bare `except:` took it ran the sweep
    to its end, twice interrupted, with exit 0."""
    import signal

    from pagecheck.cli import _Interrupt

    handler = _Interrupt()
    monkeypatch.setattr(signal, "getsignal", lambda signum: handler)
    calls = []

    def swallows(*args, **kwargs):
        calls.append(1)
        try:
            handler(signal.SIGINT, None)
        except:  # noqa: E722 - what the subject does
            pass
        if then == "raises":
            raise ValueError("after the interrupt")
        return attention_mx.paged_attention(*args, **kwargs)

    with pytest.raises(KeyboardInterrupt):
        run_sweep(swallows, TINY_GRID, seed=3)
    assert len(calls) == 1


def test_a_call_that_never_returns_fails_its_cell_at_the_time_limit() -> None:
    """Without a limit the tolerance stage waited for ever on such a subject, after the suite had timed it out."""
    import time

    calls = []

    def hangs_on_bfloat16(query, *args, **kwargs):
        calls.append(query.dtype)
        while query.dtype == mx.bfloat16:
            time.sleep(0.01)
        return attention_mx.paged_attention(query, *args, **kwargs)

    started = time.monotonic()
    body = run_sweep(hangs_on_bfloat16, TINY_GRID, seed=3, call_timeout_s=0.2)
    assert time.monotonic() - started < 30
    failed = [row for row in body["rows"] if not row["passed"]]
    assert {row["dtype"] for row in failed} == {"bfloat16"} and len(failed) == 3
    assert all(row["error"] == "CheckTimedOut: the check ran past --check-timeout 0.2 s" for row in failed)
    assert len(calls) == 6  # every cell called once: the float32 ones after a timed-out one too


def declines(dtype: str, message: str):
    """paged_attention that raises ValueError(message) on `dtype` and is the oracle otherwise."""

    def paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale=None, mask=None):
        if query.dtype == getattr(mx, dtype):
            raise ValueError(message)
        return attention_mx.paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale, mask)

    return paged_attention


@pytest.mark.parametrize(
    "dtype, message, declined",
    [("float16", "paged attention supports float32 and bfloat16, got float16", True),
     ("float16", "paged attention supports float32 and bfloat16 only", False),  # the dtype unnamed: a failure
     ("bfloat16", "bfloat16 is not supported", False)],  # a required dtype: a failure
    ids=["float16-named", "float16-unnamed", "bfloat16-required"],
)  # fmt: skip
def test_a_declined_optional_dtype_is_unsupported_not_failed(dtype: str, message: str, declined: bool) -> None:
    # As the invariants suite rules (invariants/dtype_support.py): the course's own solution declines float16, so
    # its cells are unsupported; the report once exited 4 for the course-conformant subject.
    grid = SweepGrid(dtypes=("float32", "bfloat16", "float16"), head_dims=(32,), page_sizes=(4,), query_lens=(1,),
                     contexts=(9,))  # fmt: skip
    body = run_sweep(declines(dtype, message), grid, seed=3)
    raised = [row for row in body["rows"] if row["dtype"] == dtype]
    assert len(raised) == 1 and raised[0]["declined"] is declined and not raised[0]["passed"]
    assert body["passed"] is declined
    assert body["totals"] == {"rows": 3, "passed": 2, "failed": 0 if declined else 1, "errors": 0 if declined else 1,
                              "declined": int(declined)}  # fmt: skip
    if declined:
        assert all(worst["row"] != body["rows"].index(raised[0]) for worst in body["worst"].values())


def test_invalid_grid_is_rejected_naming_the_field() -> None:
    with pytest.raises(ValueError, match="page_sizes"):
        SweepGrid(dtypes=("float32",), head_dims=(32,), page_sizes=(0,), query_lens=(1,), contexts=(4,))
