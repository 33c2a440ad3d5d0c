"""Running the invariants suite in a child pytest process and following its progress.

The suite runs in its own process (pytest-xdist workers under it) so a
subject that crashes or leaks state cannot take the report down with it.
pytest's own output goes to a log file; its progress characters are counted
as they arrive so the terminal shows how far the run is.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

PROGRESS_LINE = re.compile(r"^([.FEsxX]+)\s*(?:\[\s*(\d+)%\])?\s*$")
OUTCOME_OF_CHAR = {".": "passed", "F": "failed", "E": "errors", "s": "skipped", "x": "passed", "X": "passed"}

Progress = Callable[[dict[str, int], int | None], None]


def invariants_dir() -> Path:
    """The installed (or source-tree) invariants package that the suite is collected from."""
    spec = importlib.util.find_spec("invariants")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the invariants package is not importable; is pagecheck installed?")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


@dataclass(frozen=True)
class SuiteRequest:
    subject: str
    device: str
    seed: int
    profile: str
    jobs: int
    results_path: Path
    invariants: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.jobs < 0:
            raise ValueError(f"jobs={self.jobs} must be 0 (no workers) or a positive worker count")

    def command(self) -> list[str]:
        command = [
            sys.executable, "-m", "pytest", str(invariants_dir()),
            "-q", "--tb=short", "-p", "no:cacheprovider",
            "--subject", self.subject,
            "--device", self.device,
            "--pagecheck-seed", str(self.seed),
            "--pagecheck-profile", self.profile,
            "--pagecheck-results", str(self.results_path),
        ]  # fmt: skip
        if self.jobs > 0:
            command += ["-n", str(self.jobs)]
        for invariant in self.invariants:
            command += ["--pagecheck-invariant", invariant]
        return command


@dataclass(frozen=True)
class SuiteRun:
    command: list[str]
    returncode: int
    elapsed_s: float
    log_path: Path
    counts: dict[str, int]


def _count_progress(line: str, counts: dict[str, int]) -> int | None:
    """Add a progress line's outcomes to `counts`; return its percentage, if it shows one."""
    match = PROGRESS_LINE.match(line)
    if match is None:
        return None
    for char in match.group(1):
        counts[OUTCOME_OF_CHAR[char]] += 1
    return int(match.group(2)) if match.group(2) else None


def run_suite(request: SuiteRequest, log_path: Path, progress: Progress | None = None) -> SuiteRun:
    """Run the suite to the end, writing pytest's output to `log_path`."""
    command = request.command()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    done = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    percent: int | None = None
    start = time.perf_counter()
    with open(log_path, "wb") as log:
        log.write(("$ " + " ".join(command) + "\n\n").encode())
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        assert child.stdout is not None
        pending = ""
        try:
            while chunk := os.read(child.stdout.fileno(), 4096):
                log.write(chunk)
                pending += chunk.decode(errors="replace")
                *complete, pending = pending.split("\n")
                for line in complete:
                    percent = _count_progress(line, done) or percent
                if progress is not None:
                    # The unfinished line is counted afresh on every read, into a copy.
                    partial = dict(done)
                    _count_progress(pending, partial)
                    progress(partial, percent)
        finally:
            # Interrupted here (Ctrl-C), the suite must not run on without us.
            if child.poll() is None and sys.exc_info()[0] is not None:
                child.terminate()
        returncode = child.wait()
        percent = _count_progress(pending, done) or percent
    return SuiteRun(command, returncode, time.perf_counter() - start, log_path, done)
