"""Progress lines for long runs: stage name, counts, elapsed seconds, on stderr.

On a terminal the count line is rewritten in place; anywhere else (CI logs,
pipes) a line is printed at most every `log_every_s` seconds so logs stay short.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


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
