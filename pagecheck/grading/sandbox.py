"""Running one child under the grader's limits and reporting how it ended.

The child gets its own session (so a timeout kills it and everything it
started), a scrubbed environment, a working directory of its own, an
address-space limit and a wall-clock limit. Its peak resident memory comes
from wait4's rusage, which needs no cooperation from the child.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from pagecheck.grading.limits import DATA_SUFFIX, MEMORY_RLIMITS

POLL_S = 0.05
GIB = 1 << 30


def gib(n_bytes: float) -> str:
    """A size in GiB as a person wrote it: the fewest decimals that give back `n_bytes` as the options read a
    size (whole bytes, rounded down): 0.001, not the 0.000999999 its 1,073,741 bytes hold; 0.2499999991 for a
    byte under 0.25 GiB, which "0.25" would not tell from the limit."""
    for decimals in range(13):
        text = f"{n_bytes / GIB:.{decimals}f}"
        if int(float(text) * GIB) == int(n_bytes):
            return text.rstrip("0").rstrip(".") if "." in text else text
    return repr(n_bytes / GIB)
# The largest time limit and size a grading run takes (GradePlan checks its memory and disk): far beyond any
# run, and within what rlimits, tmpfs sizes and the waits' timeouts hold, headroom added.
MAX_SECONDS = 1_000_000.0
MAX_BYTES = 1 << 50
# ru_maxrss is in kilobytes on Linux and in bytes on macOS.
MAXRSS_UNIT = 1 if sys.platform == "darwin" else 1024

MEMORY_KINDS = tuple(MEMORY_RLIMITS)


@functools.cache
def mlx_runs_on_cuda() -> bool:
    """Whether the MLX here is built with its CUDA back-end and sees a GPU. A child that imports it then needs
    what that back-end needs to load, whichever device it computes on: the import allocates managed memory
    ("cudaMallocManaged ... failed" under any useful RLIMIT_AS), opens the GPU's device files, and the driver
    names its threads and shares memory with them."""
    try:
        import mlx.core as mx
    except ImportError:
        return False
    cuda = getattr(mx, "cuda", None)
    return bool(cuda is not None and cuda.is_available())


def loads_cuda(device: str) -> bool:
    """Whether a child computing on `device` loads MLX's CUDA back-end: on the GPU, or on a machine whose MLX has
    it (mlx_runs_on_cuda)."""
    return device == "gpu" or mlx_runs_on_cuda()


def memory_kind_for(device: str = "cpu") -> str:
    """How a memory limit binds a child that imports MLX here and computes on `device`: its data segment where it
    loads MLX's CUDA back-end (loads_cuda; the back-end reserves far more address space than it uses), else its
    address space."""
    return "data" if loads_cuda(device) else "address_space"


def check_seconds(name: str, seconds: float) -> None:
    """A time limit is a number of seconds in (0, MAX_SECONDS]; NaN is not."""
    if not 0 < seconds <= MAX_SECONDS:
        raise ValueError(f"{name}={seconds} must be a positive number of seconds, at most {MAX_SECONDS:g}")


@dataclass(frozen=True)
class Limits:
    timeout_s: float
    memory_bytes: int
    # "address_space" (RLIMIT_AS), or "data" (RLIMIT_DATA) for a child that loads MLX's CUDA back-end
    memory_kind: str = field(default_factory=memory_kind_for)

    def __post_init__(self) -> None:
        check_seconds("timeout", self.timeout_s)
        if self.memory_bytes < 256 << 20:
            raise ValueError(f"memory={gib(self.memory_bytes)} GB is below the 0.25 GB a Python child needs")
        if self.memory_kind not in MEMORY_KINDS:
            raise ValueError(f"memory_kind={self.memory_kind!r} must be one of {MEMORY_KINDS}")


@dataclass(frozen=True)
class ChildExit:
    returncode: int  # negative: the signal that ended it, as subprocess reports
    timed_out: bool
    elapsed_s: float
    peak_rss_bytes: int

    @property
    def signal_name(self) -> str | None:
        if self.returncode >= 0:
            return None
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"


def child_environment(home: Path, pythonpath: Sequence[Path]) -> dict[str, str]:
    """Only what a Python child needs: nothing of the grader's environment leaks through."""
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(home),
        "TMPDIR": str(home),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "PYTHONPATH": os.pathsep.join(str(p) for p in pythonpath),
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONSAFEPATH": "1",  # neither its folder nor a script's goes on sys.path: only what it is given
        # glibc reserves 64 MiB of address space per thread arena; RLIMIT_AS counts
        # reservations, so without a cap a threaded library eats the allowance unused.
        "MALLOC_ARENA_MAX": "2",
    }


class GradingInterrupted(RuntimeError):
    """The grader is stopping: a child killed for that reason says nothing about the submission."""


class LiveChildren:
    """The process groups of running children, so an interrupted grader can end exactly those."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: set[int] = set()
        self.stopping = threading.Event()

    def add(self, pgid: int) -> None:
        with self._lock:
            self._groups.add(pgid)
        if self.stopping.is_set():  # kill_all ran between this child's start and now
            _kill_group(pgid)

    def discard(self, pgid: int) -> None:
        with self._lock:
            self._groups.discard(pgid)

    def kill_all(self) -> None:
        """Stop for good: end every running child; children started later are refused."""
        self.stopping.set()
        with self._lock:
            groups = sorted(self._groups)
        for pgid in groups:
            _kill_group(pgid)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return


def limited_command(command: Sequence[str], memory_bytes: int, memory_kind: str = "address_space") -> list[str]:
    memory = f"{memory_bytes}{DATA_SUFFIX}" if memory_kind == "data" else str(memory_bytes)
    return [sys.executable, "-m", "pagecheck.grading.limits", memory, "--", *command]


def run_limited(
    command: Sequence[str],
    *,
    cwd: Path,
    env: dict[str, str],
    limits: Limits,
    log_path: Path,
    live: LiveChildren | None = None,
    pass_fds: tuple[int, ...] = (),
) -> ChildExit:
    """Run `command` to its end or its deadline, its output appended to `log_path`; `pass_fds` stay open in it."""
    if live is not None and live.stopping.is_set():
        raise GradingInterrupted("the grader is stopping")
    start = time.monotonic()
    deadline = start + limits.timeout_s
    with open(log_path, "ab") as log:
        log.write(("$ " + " ".join(command) + "\n").encode(errors="surrogateescape"))  # paths need not be UTF-8
        log.flush()
        child = subprocess.Popen(
            limited_command(command, limits.memory_bytes, limits.memory_kind),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            pass_fds=pass_fds,
        )
    if live is not None:
        live.add(child.pid)
    timed_out = False
    try:
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid == child.pid:
                break
            if time.monotonic() >= deadline:
                timed_out = True
                _kill_group(child.pid)
                pid, status, usage = os.wait4(child.pid, 0)
                break
            time.sleep(POLL_S)
    finally:
        # Whatever the child left running in its session goes with it.
        _kill_group(child.pid)
        if live is not None:
            live.discard(child.pid)
    child.returncode = os.waitstatus_to_exitcode(status)  # reaped here; Popen must not wait again
    if live is not None and live.stopping.is_set():
        raise GradingInterrupted("the grader stopped while this child ran")
    return ChildExit(
        returncode=child.returncode,
        timed_out=timed_out,
        elapsed_s=time.monotonic() - start,
        peak_rss_bytes=int(usage.ru_maxrss) * MAXRSS_UNIT,
    )
