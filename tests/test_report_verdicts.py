"""A report on a broken subject names the broken invariant and exits non-zero; one that cannot load says so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pagecheck.cli import main
from pagecheck.reports.conformance import conformance_body
from pagecheck.exit_codes import ExitCode
from pagecheck.invariants.runner import SuiteRun
from pagecheck.reports.schema_check import schema_errors

MUTANT = Path(__file__).resolve().parent / "mutants" / "context_minus_one.py"


def test_mutant_report_names_the_broken_invariant(tmp_path: Path) -> None:
    code = main([
        "report", "--quick", "--subject", str(MUTANT), "--invariant", "context_len", "--jobs", "0",
        "--skip", "tolerance", "--skip", "bench", "--out", str(tmp_path),
    ])  # fmt: skip
    assert code == ExitCode.INVARIANT_FAILED
    document = json.loads((tmp_path / "conformance.json").read_text())
    assert schema_errors("conformance", document) == []
    assert document["verdict"] == "fail"
    assert document["broken_invariants"] == ["context_len"]
    failures = document["invariants"][0]["failures"]
    assert failures and all(f["message"] for f in failures)
    assert "`context_len`" in (tmp_path / "conformance.md").read_text().split("## Failing checks")[1]
    assert ("broken invariants, likely cause first: `context_len` (1 of them breaks a clause the course's own tests "
            "check)") in (tmp_path / "index.md").read_text()
    assert (document["invariants"][0]["course_verdict"], document["totals"]["course_clauses_failed"]) == ("fail", 1)
    assert "Course clauses broken (checks that mirror the course's own tests): `context_len`." in (
        tmp_path / "conformance.md").read_text()


def test_a_failure_only_beyond_the_course_says_the_course_clauses_hold(tmp_path: Path) -> None:
    # No max subtraction: the course's own tests (random normal logits) accept it; softmax_stability does not.
    # (gqa_mapping beside it: the mutant's base, the reference subject, keeps float64 NumPy pages, which the
    # course's own cache checks refuse to attend over with a float32 query.)
    code = main([
        "report", "--quick", "--subject", str(MUTANT.with_name("softmax_without_max.py")), "--invariant",
        "softmax_stability", "--invariant", "gqa_mapping", "--jobs", "0", "--skip", "tolerance", "--skip", "bench",
        "--out", str(tmp_path),
    ])  # fmt: skip
    assert code == ExitCode.INVARIANT_FAILED
    document = json.loads((tmp_path / "conformance.json").read_text())
    assert schema_errors("conformance", document) == []
    verdicts = {i["id"]: (i["verdict"], i["course_verdict"], i["beyond_verdict"]) for i in document["invariants"]}
    assert verdicts == {"gqa_mapping": ("pass", "pass", "pass"), "softmax_stability": ("fail", "not_run", "fail")}
    assert document["totals"]["course_clauses_failed"] == 0
    assert "The course's clauses all hold: every failure is in a check beyond the course" in (
        tmp_path / "conformance.md").read_text()
    # The first page says it too, beside the verdict.
    assert ("broken invariants, likely cause first: `softmax_stability` (the course's own clauses all hold: every "
            "failure is beyond the course)") in (tmp_path / "index.md").read_text()


@pytest.mark.parametrize("command", ["report", "tolerance"])
@pytest.mark.parametrize("case", ["missing file", "exposes nothing"])
def test_a_subject_that_cannot_be_checked_gets_one_line_its_exit_code_and_no_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, case: str
) -> None:
    subject = tmp_path / "subject.py"
    if case == "exposes nothing":
        subject.write_text("import math\n")
    out = tmp_path / "out"
    code = main([command, "--quick", "--subject", str(subject), "--out", str(out)])
    assert code == ExitCode.SUBJECT_LOAD_FAILED
    assert not out.exists()
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and str(subject) in lines[0], lines


def test_a_suite_that_wrote_no_results_is_a_crash_not_a_pass(tmp_path: Path) -> None:
    run = SuiteRun(command=["pytest"], returncode=4, elapsed_s=1.0, log_path=tmp_path / "invariants.log", counts={})
    body = conformance_body(run, None, ())
    assert body["verdict"] == "crash"
    assert "exit status 4" in body["suite"]["problem"]
    assert "usage error" in body["suite"]["crash"]["what"]
    assert body["totals"]["invariants"] == 0


TERSE_SUBJECT = Path(__file__).resolve().parent / "subjects" / "terse_messages.py"


def test_advice_is_shown_and_never_fails(tmp_path: Path) -> None:
    subject = TERSE_SUBJECT
    code = main([
        "report", "--quick", "--subject", str(subject), "--invariant", "rejection", "--jobs", "0",
        "--skip", "tolerance", "--skip", "bench", "--out", str(tmp_path / "out"),
    ])  # fmt: skip
    assert code == ExitCode.OK
    document = json.loads((tmp_path / "out" / "conformance.json").read_text())
    assert schema_errors("conformance", document) == []
    (rejection,) = document["invariants"]
    assert rejection["verdict"] == "pass" and rejection["advice"]
    assert "## Advice" in (tmp_path / "out" / "conformance.md").read_text()


def test_a_report_into_a_folder_with_an_earlier_report_sets_that_one_aside(tmp_path: Path) -> None:
    # The index once showed an earlier run's tolerance and bench files as this run's own.
    first = ["report", "--quick", "--jobs", "0", "--invariant", "context_len", "--skip", "bench", "--out", str(tmp_path)]
    assert main(first) == ExitCode.OK
    earlier_log = (tmp_path / "invariants.log").read_text()
    assert main(["report", "--quick", "--skip", "invariants", "--skip", "bench", "--out", str(tmp_path)]) == ExitCode.OK
    (aside,) = tmp_path.glob("earlier-*")
    assert sorted(p.name for p in aside.iterdir()) == [
        "conformance.json", "conformance.md", "index.md", "invariants.log", "tolerance.json", "tolerance.md",
        "tolerance.svg",
    ]  # fmt: skip
    assert (aside / "invariants.log").read_text() == earlier_log
    assert not (tmp_path / "conformance.json").exists()
    assert "[Invariants" not in (tmp_path / "index.md").read_text()


@pytest.mark.parametrize("blocker", ["index.md", "tolerance.json"])
def test_a_folder_where_a_report_file_goes_is_a_usage_error_before_anything_runs(tmp_path: Path, blocker: str) -> None:
    (tmp_path / blocker).mkdir()
    assert main(["report", "--quick", "--skip", "bench", "--skip", "invariants", "--out", str(tmp_path)]) == ExitCode.USAGE
    assert sorted(p.name for p in tmp_path.iterdir()) == [blocker]


def test_an_interrupted_report_is_incomplete_not_a_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pagecheck.commands import report

    def interrupted(*args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "run_bench_stage", interrupted)
    code = main(["report", "--quick", "--skip", "invariants", "--out", str(tmp_path)])
    assert code == ExitCode.INTERRUPTED
    assert "**Verdict: INCOMPLETE**: stopped before `bench` finished (interrupted, or its process ended)." in (tmp_path / "index.md").read_text()


def test_an_interrupted_sweep_is_incomplete_not_a_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C after 5 cells that all passed read "Verdict: FAIL: 5 of 5 cells within tolerance" and, in the
    index, "0 tolerance cells failed"."""
    from pagecheck.bench import tolerance_sweep

    real, calls = tolerance_sweep.measure_cell, []

    def measure_cell(*args: object, **kwargs: object) -> dict:
        calls.append(1)
        if len(calls) == 6:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(tolerance_sweep, "measure_cell", measure_cell)
    assert main(["tolerance", "--quick", "--out", str(tmp_path)]) == ExitCode.INTERRUPTED
    assert "**Verdict: INCOMPLETE**: 5 of 5 cells within tolerance" in (tmp_path / "tolerance.md").read_text()
    index = (tmp_path / "index.md").read_text()
    assert "**Verdict: INCOMPLETE**: stopped before `tolerance` finished (interrupted, or its process ended)." in index and "FAIL" not in index


def test_ctrl_c_and_pagechecks_own_errors_get_their_own_exit_codes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pagecheck.commands import tolerance

    def interrupted(args: object) -> int:
        raise KeyboardInterrupt

    def broken(args: object) -> int:
        raise RuntimeError("a bug")

    monkeypatch.setattr(tolerance, "run", interrupted)
    assert main(["tolerance"]) == ExitCode.INTERRUPTED
    assert "pagecheck tolerance: interrupted" in capsys.readouterr().err
    monkeypatch.setattr(tolerance, "run", broken)
    assert main(["tolerance"]) == ExitCode.INTERNAL_ERROR
    err = capsys.readouterr().err
    assert "RuntimeError: a bug" in err and "internal error (a bug in pagecheck" in err


def test_a_report_left_with_no_stage_for_a_subject_without_attention_says_so(tmp_path, capsys) -> None:
    """With the invariants skipped, a subject without paged_attention left nothing to run: exit 2 and only
    'skipping tolerance, bench' on stdout."""
    subject = tmp_path / "pool_only.py"
    subject.write_text("from pagecheck.impl import TinyKvPagedPool, TinyKvPagedCache  # noqa: F401\n")
    code = main(["report", "--skip", "invariants", "--subject", str(subject), "--out", str(tmp_path / "out")])
    assert code == ExitCode.SUBJECT_LOAD_FAILED
    assert "nothing left to run: the stages this run keeps all need paged_attention" in capsys.readouterr().err


def test_a_subject_without_attention_is_incomplete_not_a_pass(tmp_path, capsys) -> None:
    """Its pool and cache checks ran and held, 198 of 232 checks skipped: the run said PASS with exit 0."""
    subject = tmp_path / "pool_only.py"
    subject.write_text("from pagecheck.impl import BatchingKvCache, TinyKvPagedPool, TinyKvPagedCache  # noqa: F401\n")
    out = tmp_path / "out"
    code = main(["report", "--quick", "--skip", "bench", "--subject", str(subject), "--out", str(out),
                 "--invariant", "release_once", "--invariant", "context_len"])  # fmt: skip
    assert code == ExitCode.SUBJECT_LOAD_FAILED
    assert "has no paged_attention" in capsys.readouterr().out
    assert ("**Verdict: INCOMPLETE**: the subject has no `paged_attention`, so the checks that need it did not run."
            in (out / "index.md").read_text())  # fmt: skip


SEGFAULTS_ON_ITS_FOURTH_CALL = """
import os
import signal

from pagecheck.impl import TinyKvPagedCache, TinyKvPagedPool  # noqa: F401
from pagecheck.impl import paged_attention as _paged_attention

calls = 0


def paged_attention(*args, **kwargs):
    global calls
    calls += 1
    if calls == 4:
        os.kill(os.getpid(), signal.SIGSEGV)
    return _paged_attention(*args, **kwargs)
"""


def test_a_subject_that_ends_the_process_in_the_sweep_leaves_an_index_of_what_finished(tmp_path: Path) -> None:
    """The tolerance stage runs the subject in pagecheck's own process: a segfault there ended the run with the
    invariants' report written and no index.md."""
    script = Path(sys.executable).parent / "pagecheck"
    if not script.exists():
        pytest.skip("no console script beside this interpreter")
    (tmp_path / "segfaults.py").write_text(SEGFAULTS_ON_ITS_FOURTH_CALL)
    done = subprocess.run([str(script), "report", "--quick", "--skip", "bench", "--invariant", "context_len",
                           "--subject", "segfaults.py", "--out", "out"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode != 0 and "SIGSEGV" in done.stderr, done.stderr[-2000:]
    index = (tmp_path / "out" / "index.md").read_text()
    assert "stopped before `tolerance` finished (interrupted, or its process ended)" in index
    assert "| `context_len` |" in index  # the invariants stage, which finished (its workers crashed), is summarised
