"""A report on a broken subject names the broken invariant and exits non-zero; one that cannot load says so."""

from __future__ import annotations

import json
from pathlib import Path

from pagecheck.cli import main
from pagecheck.conformance import conformance_body
from pagecheck.exit_codes import ExitCode
from pagecheck.suite_run import SuiteRun
from tests.report_schemas import schema_errors

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
    assert "broken invariants, likely cause first: `context_len`" in (tmp_path / "index.md").read_text()


def test_subject_that_does_not_load_gets_its_own_exit_code_and_report(tmp_path: Path) -> None:
    missing = tmp_path / "no_such_subject.py"
    code = main(["report", "--quick", "--subject", str(missing), "--out", str(tmp_path / "out")])
    assert code == ExitCode.SUBJECT_LOAD_FAILED
    document = json.loads((tmp_path / "out" / "conformance.json").read_text())
    assert schema_errors("conformance", document) == []
    assert document["verdict"] == "error"
    assert "no_such_subject.py" in document["subject_error"]
    assert "did not load" in (tmp_path / "out" / "index.md").read_text()


def test_a_suite_that_wrote_no_results_is_a_crash_not_a_pass(tmp_path: Path) -> None:
    run = SuiteRun(command=["pytest"], returncode=4, elapsed_s=1.0, log_path=tmp_path / "invariants.log", counts={})
    body = conformance_body(run, None, ())
    assert body["verdict"] == "crash"
    assert "exit status 4" in body["suite"]["problem"]
    assert "usage error" in body["suite"]["crash"]["what"]
    assert body["totals"]["invariants"] == 0
