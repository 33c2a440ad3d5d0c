"""The settings one grading run applies to every submission, and the subset a finished result must match."""

from __future__ import annotations

import hashlib
import importlib
from dataclasses import dataclass
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from pagecheck.invariants.catalog import INVARIANTS, check_invariant_id
from pagecheck.grading.sandbox import GIB, MAX_BYTES, Limits, check_seconds, gib, memory_kind_for
from pagecheck.grading.seeds import fingerprint
from pagecheck.grading.worker_process import WorkerLimits

DEFAULT_CALL_TIMEOUT_S = 60.0
DEFAULT_DISK_BYTES = 1 * GIB
DEFAULT_MAX_PROCESSES = 64
# The trusted suite child holds the oracle, Hypothesis and every array the worker sends back.
TRUSTED_MEMORY_HEADROOM = 4 * GIB
# MLX computes on several threads, and RLIMIT_CPU counts them all.
CPU_SECONDS_PER_WALL_SECOND = 4
# What decides a result besides the submission and the run's options: the suite, its oracles and the grader
# (their source), and the libraries that compute the subject's outputs and draw its inputs.
GRADER_PACKAGES = ("pagecheck.invariants", "pagecheck.reference", "pagecheck.grading")
GRADER_LIBRARIES = ("mlx", "numpy", "hypothesis")
SOURCE_SUFFIXES = (".py", ".toml")


def source_fingerprint(roots: list[Path]) -> str:
    """sha256 over every .py and .toml file below `roots` (path and bytes, in order; caches left out)."""
    digest = hashlib.sha256()
    for index, root in enumerate(roots):
        for path in sorted(root.rglob("*")):
            if path.suffix in SOURCE_SUFFIXES and "__pycache__" not in path.parts and path.is_file():
                digest.update(f"{index}/{path.relative_to(root).as_posix()}\0".encode())
                digest.update(path.read_bytes())
                digest.update(b"\0")
    return digest.hexdigest()


@lru_cache(maxsize=1)
def grader_fingerprint() -> str:
    """This grader's code and libraries, short: a finished result graded by another is graded again."""
    roots = [Path(importlib.import_module(name).__file__).parent for name in GRADER_PACKAGES]
    versions = ",".join(f"{name}={metadata.version(name)}" for name in GRADER_LIBRARIES)
    return hashlib.sha256(f"{source_fingerprint(roots)}|{versions}".encode()).hexdigest()[:16]


@dataclass(frozen=True)
class GradePlan:
    secret: str
    limits: Limits  # for each suite pass
    build_timeout_s: float
    profile: str
    device: str
    selected: tuple[str, ...] = ()  # invariant ids; empty: all of them
    call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S  # each call into the sandboxed worker
    disk_bytes: int = DEFAULT_DISK_BYTES  # the worker's (and the build's) scratch folder
    max_processes: int = DEFAULT_MAX_PROCESSES

    def __post_init__(self) -> None:
        for invariant in self.selected:
            check_invariant_id(invariant)
        check_seconds("build_timeout", self.build_timeout_s)
        check_seconds("call_timeout", self.call_timeout_s)
        if self.disk_bytes < 16 << 20:
            raise ValueError(f"disk={gib(self.disk_bytes)} GB is below the 16 MiB a submission's copy needs")
        if self.limits.memory_bytes > MAX_BYTES:
            raise ValueError(
                f"memory={gib(self.limits.memory_bytes)} GB is above the {MAX_BYTES // GIB} GB a run takes"
            )
        if self.disk_bytes > MAX_BYTES:
            raise ValueError(
                f"disk={gib(self.disk_bytes)} GB is above the {MAX_BYTES // GIB} GB a scratch folder takes"
            )

    @property
    def worker_limits(self) -> WorkerLimits:
        """The limits of the sandboxed worker (and of a build): memory is --memory, CPU follows the wall clock."""
        return WorkerLimits(
            memory_bytes=self.limits.memory_bytes,
            cpu_seconds=int(CPU_SECONDS_PER_WALL_SECOND * max(self.limits.timeout_s, self.build_timeout_s)),
            max_processes=self.max_processes,
            disk_bytes=self.disk_bytes,
            memory_kind=self.memory_kind,
        )

    @property
    def trusted_limits(self) -> Limits:
        """The limits of the trusted suite child: the pass's wall clock, room for the oracle."""
        return Limits(self.limits.timeout_s, self.limits.memory_bytes + TRUSTED_MEMORY_HEADROOM, self.memory_kind)

    @property
    def memory_kind(self) -> str:
        """How --memory is enforced: on the address space, or on the data segment where the children load MLX's
        CUDA back-end (on the GPU, or on any device where MLX has it), which reserves more address space than it
        uses."""
        return memory_kind_for(self.device)

    @property
    def invariants(self) -> list[str]:
        """The invariants graded, in catalog order."""
        return [name for name in INVARIANTS if not self.selected or name in self.selected]

    def settings(self) -> dict[str, Any]:
        """Everything that changes a result: a finished result with other settings is graded again."""
        return {
            "grader": grader_fingerprint(),
            "secret_fingerprint": fingerprint(self.secret),
            "invariants": self.invariants,
            "profile": self.profile,
            "device": self.device,
            "timeout_s": self.limits.timeout_s,
            "memory_bytes": self.limits.memory_bytes,
            "build_timeout_s": self.build_timeout_s,
            "call_timeout_s": self.call_timeout_s,
            "disk_bytes": self.disk_bytes,
            "max_processes": self.max_processes,
        }
