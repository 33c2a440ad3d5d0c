"""Progress lines for long runs: stage name, counts, elapsed seconds, on stderr; and the standard streams they
and every message go to, kept open (open_standard_streams).

On a terminal the count line is rewritten in place; anywhere else (CI logs,
pipes) a line is printed at most every `log_every_s` seconds so logs stay short.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO

STANDARD_STREAMS = ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w"))


def open_standard_streams() -> None:
    """Give sys.stdin, sys.stdout and sys.stderr a working stream on descriptors 0-2: /dev/null on a descriptor
    that is closed (`pagecheck ... 2>&-`), and a new stream on it where Python left one None or something closed
    it (a subject's import). Progress and messages to a closed stream are dropped, not a crash, and no pipe or
    file a command opens later takes descriptor 2 and receives its messages."""
    for fd, name, mode in STANDARD_STREAMS:
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)  # takes `fd`: the descriptors below it are open by now
        stream = getattr(sys, name)
        if stream is None or stream.closed:
            setattr(sys, name, open(fd, mode, closefd=False, buffering=1 if mode == "w" else -1))
        if mode == "w" and hasattr(getattr(sys, name), "reconfigure"):
            # A path or a subject's text the stream's encoding cannot hold (PYTHONIOENCODING=ascii) is escaped,
            # not an error after the work is done.
            getattr(sys, name).reconfigure(errors="backslashreplace")


class StageProgress:
    def __init__(
        self, stage: str, index: int, num_stages: int, *, stream: TextIO | None = None, log_every_s: float = 5.0
    ) -> None:
        self.stage = stage
        self.label = f"[{index}/{num_stages}] {stage}"
        self.stream = stream if stream is not None else sys.stderr
        self.interactive = self.stream.isatty()
        self.log_every_s = log_every_s
        self.start = time.perf_counter()
        self._last_logged = self.start
        self._pending_line = False

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self.start

    def begin(self, what: str) -> None:
        self._write_line(f"{self.label}: {what}")

    def update(self, done: int, total: int | None, detail: str = "") -> None:
        count = f"{done}/{total}" if total else f"{done}"
        text = f"{self.label}: {count} {detail}".rstrip() + f" ({self.elapsed_s:.1f} s)"
        if self.interactive:
            self.stream.write("\r\x1b[2K" + text)
            self.stream.flush()
            self._pending_line = True
            return
        now = time.perf_counter()
        if now - self._last_logged >= self.log_every_s:
            self._last_logged = now
            self._write_line(text)

    def note(self, text: str) -> None:
        """A line that stays, printed above the live count line."""
        self._write_line(f"{self.label}: {text}")

    def finish(self, summary: str) -> None:
        self._write_line(f"{self.label}: {summary} in {self.elapsed_s:.1f} s")

    def _write_line(self, text: str) -> None:
        if self._pending_line:
            self.stream.write("\r\x1b[2K")
            self._pending_line = False
        self.stream.write(text + "\n")
        self.stream.flush()
