"""The pytest plugin each grading child loads with `-p pagecheck.grading.child_plugin`.

- It installs the SDPA trap in pytest_load_initial_conftests, which pytest
  calls on `-p` plugins before it imports any conftest.py, so the trap is in
  place before the subject is loaded. Importing this module does nothing else:
  the grader imports it for its constants.
- With `--pagecheck-journal PATH` it keeps a journal (one JSON object per line,
  written as it happens) of the session start, each check started and
  finished, and each trapped SDPA call. When the child dies, the journal still
  says which check was running.
- It wraps the subject's paged_attention in the input guard (input_guard.py),
  so a call that changes its inputs fails the check that made it.
- A check that ran out of memory ends the child at once with OOM_EXIT_CODE:
  under the address-space limit every later allocation would fail too, and
  the grader reports the whole submission as out-of-memory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Generator

import pytest

from pagecheck.grading.input_guard import guard_inputs
from pagecheck.grading.sdpa_trap import TRAP

PLUGIN = __name__  # what `-p` names to load this plugin, in grading and in feedback's commands
OOM_EXIT_CODE = 86
MEMORY_ERROR_MARKERS = ("MemoryError", "std::bad_alloc")


def read_journal(path: Path) -> list[dict[str, Any]]:
    """The events a child wrote; a last line cut off by a crash is dropped."""
    if not path.exists():
        return []
    events = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return events


def is_memory_error(error: BaseException | None, seen: set[int] | None = None) -> bool:
    """True when `error`, or an exception it groups or was raised from, is an allocation failure."""
    seen = set() if seen is None else seen
    if error is None or id(error) in seen:
        return False
    seen.add(id(error))
    if isinstance(error, MemoryError) or "std::bad_alloc" in str(error):
        return True
    inner = list(getattr(error, "exceptions", ())) + [error.__cause__, error.__context__]
    return any(is_memory_error(e, seen) for e in inner)


def _memory_error_line(text: str, error: BaseException | None) -> str:
    """The line of a failure report that names the allocation failure."""
    for line in reversed(text.splitlines()):
        if any(marker in line for marker in MEMORY_ERROR_MARKERS):
            return line.strip().removeprefix("E").strip()[:500]
    return f"{type(error).__name__}: {error}"[:500]


class Journal:
    def __init__(self, path: Path) -> None:
        # Line-buffered: every event reaches the file before the next one happens.
        self._file = open(path, "a", buffering=1, encoding="utf-8")
        self._trap_calls_seen = 0

    def write(self, event: str, **fields: Any) -> None:
        self._file.write(json.dumps({"event": event, **fields}) + "\n")

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.write("session")

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.write("start", nodeid=nodeid)

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        self.write("end", nodeid=nodeid)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        for where in TRAP.calls[self._trap_calls_seen :]:
            self.write("sdpa_trap", nodeid=item.nodeid, where=where)
        self._trap_calls_seen = len(TRAP.calls)
        text = report.longreprtext if report.failed else ""
        error = call.excinfo.value if call.excinfo is not None else None
        if is_memory_error(error) or any(marker in text for marker in MEMORY_ERROR_MARKERS):
            self.write("oom", nodeid=item.nodeid, message=_memory_error_line(text, error))
            os._exit(OOM_EXIT_CODE)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests() -> None:
    TRAP.install()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--pagecheck-journal", default=None, metavar="PATH", help="grading: write the event journal here")


@pytest.hookimpl(trylast=True)  # after the suite's plugin has loaded the subject
def pytest_configure(config: pytest.Config) -> None:
    from pagecheck.invariants.plugin import SUBJECT_KEY

    path = config.getoption("pagecheck_journal")
    if path:
        config.pluginmanager.register(Journal(Path(path)), "pagecheck-journal")
    subject = config.stash.get(SUBJECT_KEY, None)
    if subject is None:  # the suite's plugin raises before this runs when the subject does not load
        raise pytest.UsageError("grading: the invariants suite loaded no subject")
    if subject.has("paged_attention"):
        subject.names["paged_attention"] = guard_inputs(subject.names["paged_attention"])
