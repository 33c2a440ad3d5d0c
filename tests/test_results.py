"""The results JSON of an invariants run: its schema, and its contents under xdist."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pagecheck.invariants.results import load_results
from pagecheck.reports.schema_check import schema_errors

ROOT = Path(__file__).resolve().parent.parent

# A subject with a lazy-tail bug and no BatchingKvCache: its run has passes, failures and skips.
SUBJECT = """
from pagecheck.reference.subject import TinyKvPagedPool, paged_attention
from tests.mutants.eager_page_allocation import TinyKvPagedCache
"""


def run_invariants(tmp_path: Path, subject: str, *options: str) -> dict[str, Any]:
    results = tmp_path / "results.json"
    command = [
        sys.executable, "-m", "pytest", "invariants", "-q", "-p", "no:randomly", "--assert=plain",
        "--pagecheck-subject", subject, "--pagecheck-results", str(results), *options,
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert results.exists(), done.stdout[-2000:] + done.stderr[-2000:]
    document = load_results(results)
    assert schema_errors("results", document) == []
    return document


def test_results_under_xdist_follow_the_schema_and_group_by_invariant(tmp_path: Path) -> None:
    subject = tmp_path / "lazy_subject.py"
    subject.write_text(SUBJECT)
    document = run_invariants(
        tmp_path, str(subject), "-n", "2", "--pagecheck-seed", "7",
        *("--pagecheck-invariant", "lazy_tail", "--pagecheck-invariant", "batching_cache"),
        *("--pagecheck-invariant", "empty_rows"),
    )
    assert (document["subject"], document["seed"], document["profile"]) == (str(subject), 7, "default")
    assert document["exit_status"] == 1
    by_outcome: dict[str, set[str]] = {}
    for check in document["checks"]:
        by_outcome.setdefault(check["outcome"], set()).add(check["invariant"])
    # lazy_tail's check that freed pages are reused first holds for an eager allocator too.
    assert by_outcome == {"pass": {"empty_rows", "lazy_tail"}, "fail": {"lazy_tail"}, "skip": {"batching_cache"}}
    for check in document["checks"]:
        if check["outcome"] == "fail":
            assert "[lazy_tail]" in check["message"]
        if check["outcome"] == "skip":
            assert "has no BatchingKvCache" in check["message"]
    assert set(document["invariants"]) >= {"lazy_tail", "batching_cache", "empty_rows", "context_len"}


def test_gpu_request_without_a_gpu_skips_every_check(tmp_path: Path) -> None:
    import mlx.core as mx

    if mx.is_available(mx.gpu):
        pytest.skip("this machine has a GPU")
    document = run_invariants(tmp_path, "reference", "--pagecheck-device", "gpu", "--pagecheck-invariant", "empty_rows")
    assert document["checks"] and {c["outcome"] for c in document["checks"]} == {"skip"}
    assert all("no GPU" in c["message"] for c in document["checks"])


def test_schema_rejects_an_unknown_outcome() -> None:
    document = {
        "format": "pagecheck-results", "version": 1, "subject": "impl", "seed": 1, "profile": "default",
        "device": "cpu", "invariants": {}, "exit_status": 0,
        "checks": [{"nodeid": "x", "invariant": "lazy_tail", "outcome": "passed", "message": "", "duration": 0.1}],
    }
    assert schema_errors("results", document) == ["$.checks[0].outcome: 'passed' is not one of ['pass', 'fail', 'error', 'skip']"]
    document["checks"][0]["outcome"] = "pass"
    assert schema_errors("results", document) == []


TERSE_SUBJECT = Path(__file__).resolve().parent / "subjects" / "terse_messages.py"


def test_rejections_without_field_names_pass_with_advice_in_the_results(tmp_path: Path) -> None:
    subject = TERSE_SUBJECT
    document = run_invariants(tmp_path, str(subject), "--pagecheck-invariant", "rejection")
    checks = document["checks"]
    assert checks and all(c["outcome"] == "pass" for c in checks), [c["message"] for c in checks if c["outcome"] != "pass"]
    advised = [c for c in checks if c["advice"]]
    assert any("test_invalid_inputs_are_rejected_unchanged[negative_context]" in c["nodeid"] for c in advised)
    assert all("names none of" in text for c in advised for text in c["advice"])
    assert {c["scope"] for c in checks} == {"course", "beyond_course"}
    assert all(bool(c["course_tests"]) == (c["scope"] == "course") for c in checks)
