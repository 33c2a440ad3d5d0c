"""Running the invariants suite in a child pytest process and following its progress.

The suite runs in its own process (pytest-xdist workers under it) so a
subject that crashes or leaks state cannot take the report down with it.
pytest's own output goes to a log file; its progress characters are counted
as they arrive so the terminal shows how far the run is.
"""

from __future__ import annotations

import os
import re
import select
import shlex
import subprocess
import tempfile
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Callable, Sequence

from pagecheck.invariants.check_timeout import check_timeout_error
from pagecheck.invariants.subject import absolute_spec, is_module_spec

PROGRESS_LINE = re.compile(r"^([.FEsxX]+)\s*(?:\[\s*(\d+)%\])?\s*$")
OUTCOME_OF_CHAR = {".": "passed", "F": "failed", "E": "errors", "s": "skipped", "x": "passed", "X": "passed"}

Progress = Callable[[dict[str, int], int | None], None]
HEARTBEAT_S = 5.0  # the longest the progress callback waits while the suite prints nothing
# The folder a module subject is looked for in, last on sys.path (read by the plugin, workers included).
SUBJECT_FOLDER_ENV = "PAGECHECK_SUBJECT_FOLDER"

SUITE_PACKAGE = __name__.rpartition(".")[0]  # pagecheck.invariants
SUITE_FOLDER = "invariants"  # the suite's folder name, in a checkout and installed


def invariants_dir() -> Path:
    """The folder the suite is collected from (installed, or the source tree's invariants/)."""
    return Path(__file__).resolve().parent


def check_id(nodeid: str) -> str:
    """A check's id that does not depend on pytest's rootdir: `pagecheck.invariants.test_x::test_y[...]`.

    pytest's node ids start with the file's path from the rootdir, which differs between a checkout
    (`invariants/test_x.py`) and an installed copy (`../lib/python3.11/site-packages/pagecheck/...`);
    ids of anything outside the suite are returned as they are.
    """
    path, sep, rest = nodeid.partition("::")
    parts = PurePosixPath(path.replace("\\", "/")).parts
    if SUITE_FOLDER not in parts or not path.endswith(".py"):
        return nodeid
    inside = parts[len(parts) - 1 - parts[::-1].index(SUITE_FOLDER) + 1 :]
    module = ".".join((SUITE_PACKAGE, *inside[:-1], inside[-1].removesuffix(".py")))
    return module + sep + rest


def rerun_command(
    check: str | None,
    *,
    subject: str,
    seed: int,
    device: str = "cpu",
    profile: str | None = None,
    invariants: Sequence[str] = (),
    extra: Sequence[str] = (),
) -> str:
    """The shell command that reruns one check (a results id or a pytest node id), or the whole suite (or
    the checks of `invariants`) when `check` is None, pasteable in any directory.

    Everything in it is absolute: the Python that runs it now, the subject (absolute_spec), the check by
    its rootdir-independent id; the seed (and profile, when given) are the run's, so the check draws the
    same inputs. A module subject resolves through sys.path, so the command puts this process's working
    directory on PYTHONPATH for it. The suite's command-line interface appears here alone.
    """
    spec = absolute_spec(subject)
    words = [
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
        "--pyargs", SUITE_PACKAGE if check is None else check_id(check),
        "--pagecheck-subject", spec, "--pagecheck-seed", str(seed),
    ]  # fmt: skip
    if device != "cpu":
        words += ["--pagecheck-device", device]
    if profile is not None:
        words += ["--pagecheck-profile", profile]
    words += [word for invariant in invariants for word in ("--pagecheck-invariant", invariant)]
    command = shlex.join([*words, *extra])
    if is_module_spec(spec):
        command = f"PYTHONPATH={shlex.quote(os.getcwd())}${{PYTHONPATH:+:$PYTHONPATH}} {command}"
    return command


@dataclass(frozen=True)
class SuiteRequest:
    subject: str
    device: str
    seed: int
    profile: str
    jobs: int
    results_path: Path
    invariants: tuple[str, ...] = ()
    check_timeout_s: float = 0.0  # per check (invariants/check_timeout.py); 0: none

    def __post_init__(self) -> None:
        if self.jobs < 0:
            raise ValueError(f"jobs={self.jobs} must be 0 (no workers) or a positive worker count")
        problem = check_timeout_error(self.check_timeout_s)
        if problem is not None:
            raise ValueError(f"check_timeout={problem}")

    def command(self) -> list[str]:
        command = [
            sys.executable, "-m", "pytest", str(invariants_dir()),
            "-q", "--tb=short", "-p", "no:cacheprovider",
            "--pagecheck-subject", self.subject,
            "--pagecheck-device", self.device,
            "--pagecheck-seed", str(self.seed),
            "--pagecheck-profile", self.profile,
            "--pagecheck-results", str(self.results_path),
        ]  # fmt: skip
        if self.jobs > 0:
            command += ["-n", str(self.jobs)]
        for invariant in self.invariants:
            command += ["--pagecheck-invariant", invariant]
        if self.check_timeout_s:
            command += ["--pagecheck-check-timeout", f"{self.check_timeout_s:g}"]
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
    """Run the suite to the end, writing pytest's output to `log_path`.

    pytest runs in a folder of its own: `python -m` (and xdist's workers, started with `-c`) put their
    working folder first on sys.path, where a random.py or json.py of the caller's would stand in for the
    standard library's. The caller's folder reaches the plugin through SUBJECT_FOLDER_ENV instead, which puts
    it last, so that a module subject there still resolves; a file subject is made absolute.
    """
    request = replace(request, subject=absolute_spec(request.subject), results_path=request.results_path.absolute())
    command = request.command()
    done = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    percent: int | None = None
    start = time.perf_counter()
    # Hypothesis keeps files (its cache of the tests' constants) in ./.hypothesis unless told otherwise: a run
    # writes nothing outside its results, so they go to a folder of its own, removed afterwards.
    with tempfile.TemporaryDirectory(prefix="pagecheck-suite-") as scratch, open(log_path, "wb") as log:
        storage = os.path.join(scratch, "hypothesis")
        env = dict(os.environ, PYTHONUNBUFFERED="1", HYPOTHESIS_STORAGE_DIRECTORY=storage,
                   **{SUBJECT_FOLDER_ENV: os.getcwd()})  # fmt: skip
        log.write(os.fsencode("$ " + " ".join(command) + "\n\n"))  # a path in it need not be UTF-8
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=scratch)
        assert child.stdout is not None
        pending = ""
        try:
            while True:
                # A check may run for minutes: while the suite is quiet, the progress line still comes every
                # HEARTBEAT_S, so its clock keeps moving.
                if select.select([child.stdout], [], [], HEARTBEAT_S)[0]:
                    chunk = os.read(child.stdout.fileno(), 4096)
                    if not chunk:
                        break
                    log.write(chunk)
                    pending += chunk.decode(errors="replace")
                    *complete, pending = pending.split("\n")
                    for line in complete:
                        percent = _count_progress(line, done) or percent
                if progress is not None:
                    # The unfinished line is counted afresh on every turn, into a copy.
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
