"""Per-check results of an invariants run, written as JSON for reports and grading.

`pytest invariants --pagecheck-results PATH` registers a ResultsCollector in
the controlling process. Under xdist the workers put each check's invariant
into report.user_properties, and the controller sees every report through
pytest_runtest_logreport, so the same collector works with and without -n.
The file's format is reports/schema/results.schema.json; each check's
`nodeid` is its rootdir-independent id (runner.check_id).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from pagecheck.invariants.course import COURSE_PROPERTY, SCOPE_PROPERTY
from pagecheck.invariants.verdict import ADVICE_PROPERTY
from pagecheck.invariants.runner import check_id

FORMAT = "pagecheck-results"
VERSION = 1
MESSAGE_LIMIT = 1200  # characters kept of a failure or skip message
OUTCOMES = ("pass", "fail", "error", "skip")


def _short(text: str) -> str:
    text = text.strip()
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 3] + "..."


def _message(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if longrepr is None:
        return ""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (path, line, reason)
        reason = str(longrepr[2])
        return _short(reason.removeprefix("Skipped: "))
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", None):
        # "invariants.verdict.InvariantViolation: ..." reads as "InvariantViolation: ...".
        return _short(re.sub(r"^(?:\w+\.)+(\w+: )", r"\1", crash.message))
    return _short(str(longrepr).strip().splitlines()[-1] if str(longrepr).strip() else "")


def _invariant(report: pytest.TestReport) -> str | None:
    return next((value for key, value in report.user_properties if key == "invariant"), None)


def _properties(report: pytest.TestReport, key: str) -> list[str]:
    return [str(value) for name, value in report.user_properties if name == key]


class ResultsCollector:
    """A pytest plugin object: gathers one entry per check and writes the JSON at session end."""

    def __init__(self, path: Path, run: dict[str, Any]) -> None:
        self.path = path
        self.run = run
        self.checks: dict[str, dict[str, Any]] = {}

    def _entry(self, nodeid: str, invariant: str | None) -> dict[str, Any]:
        nodeid = check_id(nodeid)
        entry = self.checks.setdefault(
            nodeid,
            {
                "nodeid": nodeid, "invariant": invariant, "outcome": "pass", "message": "", "duration": 0.0,
                "scope": None, "course_tests": [], "advice": [],
            },
        )
        if entry["invariant"] is None:
            entry["invariant"] = invariant
        return entry

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        entry = self._entry(report.nodeid, _invariant(report))
        entry["duration"] = round(entry["duration"] + float(report.duration), 6)
        # Each phase's report carries every property recorded so far: the latest has them all.
        scope = _properties(report, SCOPE_PROPERTY)
        if scope:
            entry["scope"], entry["course_tests"] = scope[0], _properties(report, COURSE_PROPERTY)
        entry["advice"] = _properties(report, ADVICE_PROPERTY) or entry["advice"]
        if entry["outcome"] in ("fail", "error", "skip"):
            return  # the first phase that did not pass decides
        if report.skipped:
            entry["outcome"], entry["message"] = "skip", _message(report)
        elif report.failed:
            entry["outcome"] = "fail" if report.when == "call" else "error"
            entry["message"] = _message(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            entry = self._entry(report.nodeid, None)
            entry["outcome"], entry["message"] = "error", _message(report)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        document = {
            "format": FORMAT,
            "version": VERSION,
            **self.run,
            "exit_status": int(exitstatus),
            "checks": sorted(self.checks.values(), key=lambda c: c["nodeid"]),
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(document, indent=2) + "\n")


def load_results(path: Path | str) -> dict[str, Any]:
    return json.loads(Path(path).read_text())

