"""pytest plugin for the child run of tests/course_shim.py: writes each test's outcome to $PAGECHECK_COURSE_OUTCOMES.

A test counts as failed when any of its phases failed (an error in setup included), skipped when its setup
skipped it, and passed otherwise; a test file that fails to import is one error. Deselected tests
are listed by id.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

OUTCOMES_ENV = "PAGECHECK_COURSE_OUTCOMES"

_outcomes: dict[str, str] = {}
_messages: dict[str, str] = {}
_deselected: list[str] = []


def pytest_deselected(items: list[pytest.Item]) -> None:
    _deselected.extend(item.nodeid for item in items)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:  # a test file that does not import: its tests never run
        _outcomes[report.nodeid] = "error"
        _messages[report.nodeid] = str(report.longrepr).splitlines()[-1]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed:
        _outcomes[report.nodeid] = "failed"
        _messages.setdefault(report.nodeid, _crash_message(report))
    elif report.skipped and report.when == "setup":
        _outcomes[report.nodeid] = "skipped"
    elif report.passed and report.when == "call":
        _outcomes.setdefault(report.nodeid, "passed")


def _crash_message(report: pytest.TestReport) -> str:
    crash: Any = getattr(report.longrepr, "reprcrash", None)
    return str(crash.message) if crash is not None else str(report.longrepr).splitlines()[-1]


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get(OUTCOMES_ENV)
    if path:
        document = {"outcomes": _outcomes, "messages": _messages, "deselected": _deselected}
        Path(path).write_text(json.dumps(document, indent=1, sort_keys=True))
