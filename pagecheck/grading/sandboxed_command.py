"""Running one command of the student's (an extension build) in the sandbox, and taking back what it made.

The staged submission is copied into the sandbox's scratch folder, the
command runs there under the worker's protections with its own wall-clock
limit, and init streams the submission folder back as a tar archive when the
command ends. The grader unpacks it into a fresh folder (regular files and
folders only, at most the scratch folder's size, no path leaving the
folder) and only then puts it in place of the staged copy, so a build
cannot write anywhere else, and a build that fails leaves the staged copy
as it was.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from pagecheck.grading.launcher import SCRATCH_PLACEHOLDER, SUBMISSION_DIR, LaunchConfig, read_status, scratch_mountpoint
from pagecheck.grading.sandbox import POLL_S, ChildExit, GradingInterrupted, LiveChildren
from pagecheck.grading.worker_process import (
    SYSTEM_READ_PATHS,
    WORKER_ENV,
    WorkerLimits,
    code_roots,
    harness_roots,
    python_read_paths,
)

# A build reads compilers' settings and headers too.
BUILD_READ_PATHS = ("/etc", "/opt", "/usr/local")
SYSTEM_BIN_PATH = "/usr/local/bin:/usr/bin:/bin"


def build_path() -> str:
    """PATH for a build: the grader interpreter's scripts folder first (where pip puts cmake, pinned among
    pagecheck's dependencies, even when the grader's environment is not activated), then the system's."""
    return f"{Path(sys.executable).parent}:{SYSTEM_BIN_PATH}"


@dataclass(frozen=True)
class SandboxedRun:
    exit: ChildExit
    protections: dict[str, str]
    copied_back: bool
    detail: str  # why nothing was copied back, when nothing was


class _Collector(threading.Thread):
    """Reads the tar stream into a file, keeping at most `limit` bytes."""

    def __init__(self, fd: int, path: Path, limit: int) -> None:
        super().__init__(daemon=True, name="sandbox-products")
        self.fd, self.path, self.limit = fd, path, limit
        self.overflow = False

    def run(self) -> None:
        kept = 0
        with open(self.path, "wb") as file:
            while chunk := os.read(self.fd, 1 << 16):
                if kept + len(chunk) > self.limit:
                    self.overflow = True
                    continue
                file.write(chunk)
                kept += len(chunk)
        os.close(self.fd)


def _unpack(archive: Path, target: Path) -> None:
    """Regular files and folders of the archive into `target` (which must not exist)."""
    target.mkdir()
    with tarfile.open(archive, mode="r:") as tar:
        members = [m for m in tar.getmembers() if m.isfile() or m.isdir()]
        tar.extractall(target, members=members, filter="data")


def run_sandboxed(
    command: list[str],
    *,
    copy_in: Path,
    workdir: str,
    timeout_s: float,
    limits: WorkerLimits,
    log_path: Path,
    hide_paths: list[str],
    live: LiveChildren | None,
) -> SandboxedRun:
    """Run `command` in the sandbox from SCRATCH/submission/WORKDIR; on success `copy_in` holds what it made."""
    if live is not None and live.stopping.is_set():
        raise GradingInterrupted("the grader is stopping")
    config_r, config_w = os.pipe()
    status_r, status_w = os.pipe()
    output_r, output_w = os.pipe()
    read_paths = sorted({*SYSTEM_READ_PATHS, *BUILD_READ_PATHS, *python_read_paths()})
    config = LaunchConfig(
        argv=command,
        env={**WORKER_ENV, "PATH": build_path()},
        scratch_mountpoint=scratch_mountpoint(read_paths),
        fallback_scratch=tempfile.mkdtemp(prefix="pagecheck-build-"),
        copy_in=str(copy_in),
        read_paths=read_paths,
        hide_paths=sorted({*hide_paths, *harness_roots()}),
        memory_bytes=limits.memory_bytes,
        cpu_seconds=limits.cpu_seconds,
        max_processes=limits.max_processes,
        max_file_bytes=limits.max_file_bytes,
        disk_bytes=limits.disk_bytes,
        status_fd=status_w,
        output_fd=output_w,
        workdir=os.path.join(SUBMISSION_DIR, workdir),
    )
    env = {"PATH": os.environ.get("PATH", os.defpath), "LANG": os.environ.get("LANG", "C.UTF-8"),
           "PYTHONPATH": os.pathsep.join(code_roots()), "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip
    archive = Path(tempfile.mkstemp(prefix="pagecheck-products-", suffix=".tar")[1])
    start = time.monotonic()
    with open(log_path, "ab") as log:
        log.write(("$ " + " ".join(command) + f"  (in the sandbox, from {SCRATCH_PLACEHOLDER}/"
                   f"{config.workdir})\n").encode())  # fmt: skip
        log.flush()
        try:
            child = subprocess.Popen(
                [sys.executable, "-m", "pagecheck.grading.launcher", str(config_r)],
                pass_fds=(config_r, status_w, output_w), stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd="/",
            )  # fmt: skip
        finally:
            for fd in (config_r, status_w, output_w):
                os.close(fd)
    with os.fdopen(config_w, "w") as file:
        file.write(json.dumps(asdict(config)))
    collector = _Collector(output_r, archive, limits.disk_bytes)
    collector.start()
    if live is not None:
        live.add(child.pid)
    timed_out = False
    try:
        while child.poll() is None:
            if time.monotonic() - start >= timeout_s:
                timed_out = True
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
                break
            time.sleep(POLL_S)
    finally:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if live is not None:
            live.discard(child.pid)
    collector.join()
    protections, report = read_status(status_r)
    shutil.rmtree(config.fallback_scratch, ignore_errors=True)
    if live is not None and live.stopping.is_set():
        archive.unlink(missing_ok=True)
        raise GradingInterrupted("the grader stopped while the build ran")
    code = int(report["exit"]) if isinstance(report.get("exit"), int) else child.returncode
    exit = ChildExit(returncode=-(code - 128) if code > 128 else code, timed_out=timed_out,
                     elapsed_s=time.monotonic() - start, peak_rss_bytes=int(report.get("maxrss_kb", 0)) * 1024)  # fmt: skip
    copied, detail = False, ""
    if timed_out or "exit" not in report:
        detail = "the sandbox ended before the build did"
    elif collector.overflow:
        detail = f"the build's folder is over {limits.disk_bytes} bytes"
    else:
        fresh = copy_in.with_name(copy_in.name + ".built")
        shutil.rmtree(fresh, ignore_errors=True)
        try:
            _unpack(archive, fresh)
            shutil.rmtree(copy_in)
            fresh.rename(copy_in)
            copied = True
        except (OSError, tarfile.TarError) as exc:
            shutil.rmtree(fresh, ignore_errors=True)
            detail = f"what the build made could not be taken back: {exc}"
    archive.unlink(missing_ok=True)
    return SandboxedRun(exit, protections, copied, detail)
