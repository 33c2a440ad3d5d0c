"""A suite run that crashed: how to tell, and the part of pytest's log that says why.

The suite crashed when its pytest process did not reach its verdicts: it was
killed by a signal (a segfault in the subject), stopped with pytest's
interrupted, internal-error or usage-error status (a subject that fails to
import inside the suite is a usage error), wrote no results file, or an
xdist worker died under a check. A crash is not a verdict on any invariant;
the report shows its cause instead of empty tables.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Any

# pytest's exit statuses that mean the run stopped before its verdicts (pytest.ExitCode).
PYTEST_CRASH_STATUS = {2: "pytest was interrupted", 3: "pytest hit an internal error", 4: "pytest stopped on a usage error"}
# What pytest-xdist writes in place of a check's report when the worker running it died.
WORKER_CRASH = re.compile(r"worker '[^']+' crashed while running")
CAUSE_LINES = 16  # lines of the log kept as the cause

FAULT_START = "Fatal Python error:"
CURRENT_THREAD = "Current thread"
TRACEBACK_START = "Traceback (most recent call last):"
INTERNAL_ERROR = "INTERNALERROR>"
USAGE_ERROR = "ERROR: "


def signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def crash_kind(returncode: int, results: dict[str, Any] | None) -> str | None:
    """Why the run counts as crashed, in words; None when it reached its verdicts."""
    if returncode < 0:
        return f"the pytest process was killed by {signal_name(returncode)}"
    if returncode in PYTEST_CRASH_STATUS:
        return f"{PYTEST_CRASH_STATUS[returncode]} (exit status {returncode})"
    if results is None:
        return f"the pytest process ended with exit status {returncode} without writing its results"
    crashed = [c["nodeid"] for c in results["checks"] if c["outcome"] in ("fail", "error") and WORKER_CRASH.search(c["message"])]
    if crashed:
        return f"{len(crashed)} pytest-xdist worker{'s' if len(crashed) > 1 else ''} died under a check (first: {crashed[0]})"
    return None


def crash_cause(log_text: str) -> str:
    """The lines of pytest's output that say why it crashed, at most CAUSE_LINES of them.

    Most specific first: a fatal-error dump (faulthandler: the crashing frame
    is at its top), the last Python traceback (the exception is at its end),
    pytest's INTERNALERROR lines, its usage-error lines; else the log's end.
    """
    lines = [line for line in log_text.splitlines() if not line.startswith("$ ")]
    # faulthandler writes to stderr mid-line when pytest's progress dots have
    # no newline yet: the dump starts where its phrase does.
    starts = [i for i, line in enumerate(lines) if FAULT_START in line]
    if starts:
        first = lines[starts[-1]]
        dump = [first[first.index(FAULT_START) :], *(line for line in lines[starts[-1] + 1 :] if line.strip())]
        # Of the threads faulthandler lists, the current one crashed.
        current = next((i for i, line in enumerate(dump) if line.startswith(CURRENT_THREAD)), None)
        if current is not None:
            dump = [dump[0], *dump[current:]]
        return "\n".join(dump[:CAUSE_LINES])
    starts = [i for i, line in enumerate(lines) if line.strip() == TRACEBACK_START]
    if starts:
        block = lines[starts[-1] :]
        ends = [i for i, line in enumerate(block) if i > 0 and line and not line.startswith((" ", "\t"))]
        block = block[: ends[0] + 1] if ends else block
        return "\n".join([block[0], *block[1:][-(CAUSE_LINES - 1) :]])
    internal = [line for line in lines if line.startswith(INTERNAL_ERROR)]
    if internal:
        return "\n".join(internal[-CAUSE_LINES:])
    usage = [line for line in lines if line.startswith(USAGE_ERROR)]
    if usage:
        return "\n".join(usage[-CAUSE_LINES:])
    return "\n".join([line for line in lines if line.strip()][-CAUSE_LINES:])


def crash_report(returncode: int, results: dict[str, Any] | None, log_path: Path) -> dict[str, Any] | None:
    """conformance.json's `suite.crash`: what happened and the log lines that say why; None if no crash."""
    kind = crash_kind(returncode, results)
    if kind is None:
        return None
    text = log_path.read_text(errors="replace") if log_path.exists() else ""
    return {"what": kind, "cause": crash_cause(text) or "(the log is empty)", "log": log_path.name}
