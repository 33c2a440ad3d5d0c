"""The pytest plugin each grading child loads with `-p pagecheck.grading.child_plugin`.

The child is trusted: it runs the suite against `--pagecheck-subject sandbox:SPEC`, so
the subject lives in a sandboxed worker (remote_subject.py) and nothing of
the student's runs in this process. Importing this module does nothing; the
grader imports it for its constants.

- `--pagecheck-sandbox PATH` gives the worker's settings (the staged
  submission, limits, the worker log); without it a `sandbox:` subject is
  staged from its spec.
- `--pagecheck-seed-fd FD` reads the seed from a pipe instead of the command
  line, so the hidden seed is in no process's arguments or environment.
- With `--pagecheck-journal PATH` it keeps a journal (one JSON object per
  line, written as it happens) of the session start, each check started and
  finished, what the worker's tripwires and audit hook reported, every
  worker incident (crash, timeout, out-of-memory), and which protections
  the sandbox had. When the child dies, the journal still says which check
  was running.
- It tells the worker session when each check begins, so a worker that died
  is replaced for the next check.
- It wraps the subject's paged_attention in the input guard (input_guard.py),
  so a call that changes its inputs fails the check that made it beyond the
  course, and is advice on a course clause.
- A check that ran out of memory in this process ends it at once with
  OOM_EXIT_CODE. (A worker out of memory is an incident of one check.)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Generator

import pytest

from pagecheck.grading import remote_subject
from pagecheck.grading.input_guard import guard_inputs
from pagecheck.grading.worker_process import WorkerIncident, WorkerSettings

PLUGIN = __name__  # what `-p` names to load this plugin, in grading and in feedback's commands
JOURNAL_PLUGIN = "pagecheck-journal"
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


def _from_worker(error: BaseException, seen: set[int] | None = None) -> bool:
    """True when `error`, or an exception it groups or was raised from, is a worker incident."""
    seen = set() if seen is None else seen
    if id(error) in seen:
        return False
    seen.add(id(error))
    if isinstance(error, WorkerIncident):
        return True
    inner = [e for e in [*getattr(error, "exceptions", ()), error.__cause__, error.__context__] if e is not None]
    return any(_from_worker(e, seen) for e in inner)


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
        self._events_seen = 0
        self._protections_written = False

    def write(self, event: str, **fields: Any) -> None:
        self._file.write(json.dumps({"event": event, **fields}) + "\n")

    def write_worker_events(self) -> None:
        """Everything the worker session recorded since the last call, each under the check it happened in;
        first, once, the sandbox's protections and the worker's scratch folder (its paths show it)."""
        session = remote_subject.active_session()
        if session is None:
            return
        if not self._protections_written and session.protections:
            self.write("protections", state=session.protections, scratch=session.scratch)
            self._protections_written = True
        for event in session.events[self._events_seen :]:
            fields = {k: v for k, v in event.items() if k not in ("kind", "check", "event", "nodeid")}
            self.write(str(event.get("kind", "worker")), nodeid=event.get("check", ""), **fields)
        self._events_seen = len(session.events)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.write("session")
        self.write_worker_events()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.write("collected", count=len(session.items))

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.write("start", nodeid=nodeid)

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        self.write_worker_events()
        self.write("end", nodeid=nodeid)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        self.write_worker_events()
        text = report.longreprtext if report.failed else ""
        error = call.excinfo.value if call.excinfo is not None else None
        if error is not None and _from_worker(error):
            return  # the worker's memory, not this process's: an incident of this check only
        if is_memory_error(error) or any(marker in text for marker in MEMORY_ERROR_MARKERS):
            self.write("oom", nodeid=item.nodeid, message=_memory_error_line(text, error))
            os._exit(OOM_EXIT_CODE)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--pagecheck-journal", default=None, metavar="PATH", help="grading: write the event journal here")
    parser.addoption("--pagecheck-sandbox", default=None, metavar="PATH",
                     help="grading: the sandboxed worker's settings (JSON)")  # fmt: skip
    parser.addoption("--pagecheck-seed-fd", type=int, default=None, metavar="FD",
                     help="grading: read the seed from this pipe instead of --pagecheck-seed")  # fmt: skip


def _read_seed(fd: int) -> int:
    with os.fdopen(fd, "r") as pipe:
        text = pipe.read().strip()
    if not text.isdigit():
        raise pytest.UsageError("grading: the seed pipe held no seed")
    return int(text)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    # Runs after the options are parsed and before any pytest_configure: the suite's plugin reads the seed
    # and loads the subject in its own (sandbox: specs through remote_subject, registered when imported).
    seed_fd = config.getoption("pagecheck_seed_fd")
    if seed_fd is not None:
        config.option.pagecheck_seed = _read_seed(seed_fd)
    settings = config.getoption("pagecheck_sandbox")
    if settings:
        remote_subject.configure(WorkerSettings.from_json(Path(settings).read_text()))
    path = config.getoption("pagecheck_journal")
    if path:  # registered now, so that what the worker reports while the subject loads is kept even if it fails
        config.pluginmanager.register(Journal(Path(path)), JOURNAL_PLUGIN)


@pytest.hookimpl(trylast=True)  # after the suite's plugin has loaded the subject
def pytest_configure(config: pytest.Config) -> None:
    remote_subject.configure(None)
    _after_configure(config)


def _after_configure(config: pytest.Config) -> None:
    from pagecheck.invariants.plugin import SUBJECT_KEY

    subject = config.stash.get(SUBJECT_KEY, None)
    if subject is None:  # the suite's plugin raises before this runs when the subject does not load
        raise pytest.UsageError("grading: the invariants suite loaded no subject")
    if subject.has("paged_attention"):
        subject.names["paged_attention"] = guard_inputs(subject.names["paged_attention"], _advise)


_RUNNING: list[pytest.Item] = []  # the check running now


def _advise(text: str) -> None:
    """Advice on the running check, once per text (verdict.ADVICE_PROPERTY, as the suite's `advise` fixture)."""
    from pagecheck.invariants.verdict import ADVICE_PROPERTY

    if _RUNNING and (ADVICE_PROPERTY, text) not in _RUNNING[0].user_properties:
        _RUNNING[0].user_properties.append((ADVICE_PROPERTY, text))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _RUNNING[:] = [item]
    session = remote_subject.active_session()
    if session is not None:
        session.begin_check(item.nodeid)


def pytest_unconfigure(config: pytest.Config) -> None:
    journal = config.pluginmanager.get_plugin(JOURNAL_PLUGIN)
    if journal is not None:
        journal.write_worker_events()
    remote_subject.close_sessions()
