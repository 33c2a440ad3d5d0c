"""Building results documents for grading tests without running the suite: one builder, shared."""

from __future__ import annotations

from typing import Any

from pagecheck.grading.results_store import FORMAT, VERSION
from pagecheck.invariants.course import BEYOND_COURSE_MARK, CLAUSE_SCOPES


def check(invariant: str, outcome: str, index: int = 0, message: str = "", scope: str | None = None) -> dict[str, Any]:
    """One check; its scope is the invariant's course clause where it has one, else beyond the course."""
    passes = [] if outcome == "pass" else ["public", "hidden"]
    return {"nodeid": f"invariants/test_{invariant}.py::test_{scope or ''}{index}", "invariant": invariant,
            "scope": scope or CLAUSE_SCOPES[invariant][0], "outcome": outcome, "message": message,
            "passes": passes}  # fmt: skip


def result_document(
    name: str,
    outcomes: dict[str, list[str]],
    *,
    verdict: str = "ok",
    findings: tuple[str, ...] = (),
    settings: dict[str, Any] | None = None,
    beyond: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    """A results document with the given check outcomes per invariant (graded: exactly those invariants, and
    those of `beyond`, whose checks are marked beyond the course)."""
    checks = [check(inv, outcome, i) for inv, listed in outcomes.items() for i, outcome in enumerate(listed)]
    checks += [check(inv, outcome, i, scope=BEYOND_COURSE_MARK)
               for inv, listed in (beyond or {}).items() for i, outcome in enumerate(listed)]  # fmt: skip
    graded = list(dict.fromkeys([*outcomes, *(beyond or {})]))
    return {
        "format": FORMAT,
        "version": VERSION,
        "name": name,
        "kind": "file",
        "student_spec": f"/submissions/{name}.py",
        "digest": "0" * 64,
        "source": f"/submissions/{name}.py",
        "settings": {
            "grader": "0" * 16, "invariants": graded, "secret_fingerprint": "f" * 16, "profile": "default",
            "device": "cpu", "timeout_s": 300.0, "memory_bytes": 4 << 30, "build_timeout_s": 600.0,
            "call_timeout_s": 60.0, "disk_bytes": 1 << 30, "max_processes": 64, **(settings or {}),
        },
        "verdict": verdict,
        "detail": "SIGSEGV" if verdict == "crashed" else "",
        "running_check": None,
        "failed_pass": None,
        "build": None,
        "passes": [_suite_pass("public", 20240901, verdict), _suite_pass("hidden", 123456789, verdict)],
        "checks": checks,
        "findings": [{"file": f"{name}.py", "line": 1, "kind": kind, "detail": "x"} for kind in findings],
        "incidents": [],
        "protections": {},
        "started_at": "2026-12-01T09:00:00+0000",
        "elapsed_s": 12.5,
    }


def _suite_pass(kind: str, seed: int, verdict: str) -> dict[str, Any]:
    return {"kind": kind, "seed": seed, "verdict": verdict, "detail": "", "running_check": None, "returncode": 0,
            "signal": None, "elapsed_s": 6.0, "peak_rss_mb": 300.0, "checks_run": 230, "worker_incidents": 0}
