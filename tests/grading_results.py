"""Building results documents for grading tests without running the suite: one builder, shared."""

from __future__ import annotations

from typing import Any

from pagecheck.grading.results_store import FORMAT, VERSION


def check(invariant: str, outcome: str, index: int = 0, message: str = "") -> dict[str, Any]:
    passes = [] if outcome == "pass" else ["public", "hidden"]
    return {"nodeid": f"invariants/test_{invariant}.py::test_{index}", "invariant": invariant,
            "outcome": outcome, "message": message, "passes": passes}  # fmt: skip


def result_document(
    name: str,
    outcomes: dict[str, list[str]],
    *,
    verdict: str = "ok",
    findings: tuple[str, ...] = (),
    settings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A results document with the given check outcomes per invariant (graded: exactly those invariants)."""
    checks = [check(inv, outcome, i) for inv, listed in outcomes.items() for i, outcome in enumerate(listed)]
    return {
        "format": FORMAT,
        "version": VERSION,
        "name": name,
        "kind": "file",
        "student_spec": f"/submissions/{name}.py",
        "digest": "0" * 64,
        "settings": settings or {"invariants": list(outcomes), "secret_fingerprint": "f" * 16},
        "verdict": verdict,
        "detail": "SIGSEGV" if verdict == "crashed" else "",
        "running_check": None,
        "failed_pass": None,
        "build": None,
        "passes": [{"kind": "public", "seed": 20240901}, {"kind": "hidden", "seed": 123456789}],
        "checks": checks,
        "findings": [{"file": f"{name}.py", "line": 1, "kind": kind, "detail": "x"} for kind in findings],
    }
