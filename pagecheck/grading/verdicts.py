"""How a child's exit becomes a verdict, for one suite pass and for the whole submission.

    ok             the suite ran to its end and wrote its results
    build-failed   the extension did not build and the subject cannot load without it
    load-failed    the subject does not import (no build involved)
    crashed        the child died of a signal, or exited without results
    timed-out      the wall-clock limit was reached
    out-of-memory  an allocation failed under the memory limit

MLX does not raise when an allocation fails under the address-space limit: it
dies of SIGSEGV. So a child that dies of a signal after touching at least
OOM_RSS_FRACTION of its allowance counts as out of memory. (RLIMIT_AS counts
reserved address space that is never touched, so resident memory at the
failing allocation sits well below the limit; a genuine crash of a small
process touches far less than half of it.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pagecheck.grading.child_plugin import OOM_EXIT_CODE
from pagecheck.grading.sandbox import GIB, ChildExit, gib

VERDICTS = ("ok", "build-failed", "load-failed", "crashed", "timed-out", "out-of-memory")
OOM_RSS_FRACTION = 0.5
# pytest's exit statuses after which the results file is complete.
FINISHED_STATUSES = (0, 1, 5)
USAGE_ERROR_STATUS = 4  # what pytest returns when the suite's plugin cannot load the subject


@dataclass(frozen=True)
class Verdict:
    verdict: str
    detail: str

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict={self.verdict!r} is not one of {VERDICTS}")


def _usage_error(log_text: str) -> str:
    errors = [line.removeprefix("ERROR: ").strip() for line in log_text.splitlines() if line.startswith("ERROR")]
    return errors[-1] if errors else "the subject could not be loaded"


def classify_pass(
    exit: ChildExit, journal: list[dict[str, Any]], has_results: bool, log_text: str, memory_bytes: int
) -> Verdict:
    """The verdict of one suite pass, from how its child ended and what it left behind."""
    if exit.timed_out:
        return Verdict("timed-out", "the wall-clock limit was reached")
    oom_events = [e for e in journal if e.get("event") == "oom"]
    if oom_events or exit.returncode == OOM_EXIT_CODE:
        message = oom_events[-1].get("message", "") if oom_events else ""
        return Verdict("out-of-memory", message or "an allocation failed under the memory limit")
    if exit.signal_name is not None:
        if exit.peak_rss_bytes >= OOM_RSS_FRACTION * memory_bytes:
            return Verdict(
                "out-of-memory",
                f"{exit.signal_name} with {exit.peak_rss_bytes / GIB:.2f} GB resident of a {gib(memory_bytes)} GB limit",
            )
        return Verdict("crashed", exit.signal_name)
    if has_results and exit.returncode in FINISHED_STATUSES:
        # A pass is finished when every check it collected ended: one that stopped early (a worker frame that
        # broke the suite's journal, say) must not leave its first checks to stand for the rest.
        collected = [e for e in journal if e.get("event") == "collected"]
        ended = {e.get("nodeid") for e in journal if e.get("event") == "end"}
        expected = int(collected[-1].get("count", 0)) if collected else 0
        if len(ended) < expected:
            return Verdict("crashed", f"the suite stopped after {len(ended)} of its {expected} checks")
        return Verdict("ok", "")
    started = any(e.get("event") == "session" for e in journal)
    if exit.returncode == USAGE_ERROR_STATUS and not started:
        return Verdict("load-failed", _usage_error(log_text))
    if "MemoryError" in log_text:
        return Verdict("out-of-memory", "MemoryError outside any check")
    return Verdict("crashed", f"exit status {exit.returncode} without results")
