"""Runs a command under the grader's limits: `python -m pagecheck.grading.limits BYTES -- COMMAND...`.

The limits are set here, in a process of its own, and then this process
becomes COMMAND through exec, so they hold for everything the submission
runs. (Setting them in a preexec_fn would run Python between fork and exec
in a process forked from a threaded grader, which can deadlock.)

- RLIMIT_AS caps the address space: an allocation past it fails inside the child.
  With MEMORY given as BYTES:data, RLIMIT_DATA caps the data segment and the
  private writable mappings instead, leaving the address space free: MLX's
  CUDA back-end reserves far more address space than it uses (its import
  fails under a 4 GiB RLIMIT_AS, measured on the H200).
- RLIMIT_CORE = 0: a crashing submission leaves no core file behind.
- RLIMIT_FSIZE caps any one file it writes (its log included) at MAX_FILE_BYTES;
  past it the write fails with SIGXFSZ, reported as a crash.
- On Linux the child is killed when the grader dies (PR_SET_PDEATHSIG), so a
  grader stopped with SIGKILL leaves no hanging submission running.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys

PR_SET_PDEATHSIG = 1
MAX_FILE_BYTES = 1 << 30  # room for an extension build, not for filling the disk
USAGE = "usage: python -m pagecheck.grading.limits MEMORY_BYTES[:data] -- COMMAND [ARG...]"
# How a memory limit is enforced -> the rlimit that holds it (this program's and the sandbox launcher's).
MEMORY_RLIMITS = {"address_space": "RLIMIT_AS", "data": "RLIMIT_DATA"}
DATA_SUFFIX = ":data"


def die_with_parent() -> None:
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() == 1:  # the grader died before prctl took effect
        sys.exit(f"{sys.argv[0]}: the grader is gone; not starting")


def apply_limits(memory_bytes: int, memory_kind: str = "address_space") -> None:
    memory = getattr(resource, MEMORY_RLIMITS[memory_kind])
    resource.setrlimit(memory, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] != "--":
        sys.exit(USAGE)
    memory, kind = argv[0].removesuffix(DATA_SUFFIX), "data" if argv[0].endswith(DATA_SUFFIX) else "address_space"
    if not memory.isdigit():
        sys.exit(USAGE)
    apply_limits(int(memory), kind)
    die_with_parent()
    os.execvp(argv[2], argv[2:])


if __name__ == "__main__":
    main(sys.argv[1:])
