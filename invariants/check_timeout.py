"""A time limit for each check of the suite (--pagecheck-check-timeout S): a subject that never returns fails
that one check instead of holding the run forever.

Two stages, both armed around the check's call and disarmed after it:

    at S s        SIGALRM; its handler raises CheckTimedOut as soon as the subject's Python code takes its next
                  step, so a loop in Python ends here and the run goes on. CheckTimedOut derives from
                  BaseException alone: neither a subject's `except Exception` nor Hypothesis (which would
                  shrink, running the subject again) takes it for an ordinary failure. The plugin reports it
                  as the check's failure.
    at S + grace  faulthandler prints every thread's stack and ends the process: a subject stuck in native
                  code never returns to Python. Under pytest-xdist the worker dies, xdist fails the check
                  ("worker crashed") and starts another; without workers the run itself ends there.

The alarm needs the main thread and a platform with SIGALRM; elsewhere only the second stage holds.
"""

from __future__ import annotations

import faulthandler
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

GRACE_S = 30.0  # the grace before the second stage: this, or S itself when S is shorter
# The longest limit taken (about 11.6 days): setitimer and the faulthandler timer overflow far above it.
MAX_CHECK_TIMEOUT_S = 1_000_000.0
# The shortest: below it no check of a correct subject finishes, and every one would read as broken.
MIN_CHECK_TIMEOUT_S = 0.1


def check_timeout_error(seconds: float) -> str | None:
    """Why `seconds` is no time limit a run takes (0: none, or MIN_CHECK_TIMEOUT_S..MAX_CHECK_TIMEOUT_S), or None."""
    if seconds == 0 or MIN_CHECK_TIMEOUT_S <= seconds <= MAX_CHECK_TIMEOUT_S:
        return None
    return f"{seconds:g} must be 0 (no limit) or a number of seconds from {MIN_CHECK_TIMEOUT_S:g} to {MAX_CHECK_TIMEOUT_S:g}"


class CheckTimedOut(BaseException):
    """A check ran past its time limit (raised in the main thread by SIGALRM)."""


@contextmanager
def time_limit(seconds: float, option: str = "--pagecheck-check-timeout") -> Iterator[None]:
    """Fail the check run inside once it passes `seconds` (CheckTimedOut naming `option`, the setting that gave
    the limit); end the process a grace later. 0: no limit."""
    if seconds <= 0:
        yield
        return
    alarm = hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread()
    previous = None
    if alarm:

        def expire(signum: int, frame: object) -> None:
            raise CheckTimedOut(f"the check ran past {option} {seconds:g} s")

        previous = signal.signal(signal.SIGALRM, expire)
        signal.setitimer(signal.ITIMER_REAL, seconds)
    faulthandler.dump_traceback_later(seconds + min(GRACE_S, seconds), exit=True, file=sys.__stderr__ or sys.stderr)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
        if alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            # None: the handler before was not set from Python; the default is what can be put back.
            signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)
