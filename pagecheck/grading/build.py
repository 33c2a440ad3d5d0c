"""Building a tiny-llm checkout's C++ extension inside its staged copy.

tiny-llm keeps the extension in src/extensions and builds it in place with
`python build.py` (older checkouts: `python setup.py build_ext --inplace`).
The build is student code (build.py, CMake's execute_process), so it runs in
the sandbox (sandboxed_command.py) with its own timeout; what it made comes
back into the staged copy only when it finished, and its output goes to a
log the grader keeps. A failed build is not yet a verdict: the subject may
not need the extension, which the first suite pass finds out.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from pagecheck.grading.sandbox import LiveChildren, Limits
from pagecheck.grading.sandboxed_command import run_sandboxed
from pagecheck.grading.worker_process import WorkerLimits

EXTENSION_DIR = Path("src") / "extensions"
# The first script present is run, with these arguments, from the extension directory.
BUILD_SCRIPTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("build.py", ()),
    ("setup.py", ("build_ext", "--inplace")),
)


@dataclass(frozen=True)
class BuildOutcome:
    ok: bool
    detail: str
    elapsed_s: float

    def as_dict(self) -> dict[str, object]:
        return {"ok": self.ok, "detail": self.detail, "elapsed_s": round(self.elapsed_s, 3)}


def build_command(root: Path) -> list[str] | None:
    """The command that builds the checkout's extension, or None when it has nothing to build."""
    directory = root / EXTENSION_DIR
    for script, arguments in BUILD_SCRIPTS:
        if (directory / script).is_file():
            return [sys.executable, script, *arguments]
    return None


def build_extension(
    staged: Path, root: Path, command: list[str], *, limits: Limits, worker_limits: WorkerLimits, log_path: Path,
    hide_paths: list[str], live: LiveChildren | None,
) -> BuildOutcome:  # fmt: skip
    """Build in the sandbox; `staged` is the folder copied in and back, `root` the checkout inside it."""
    workdir = (root / EXTENSION_DIR).relative_to(staged).as_posix()
    run = run_sandboxed(command, copy_in=staged, workdir=workdir, timeout_s=limits.timeout_s, limits=worker_limits,
                        log_path=log_path, hide_paths=hide_paths, live=live)  # fmt: skip
    exit = run.exit
    script = Path(command[1]).name
    if exit.timed_out:
        return BuildOutcome(False, f"{script} timed out after {limits.timeout_s:g} s", exit.elapsed_s)
    if exit.returncode != 0:
        how = exit.signal_name or f"exit status {exit.returncode}"
        return BuildOutcome(False, f"{script} failed ({how})", exit.elapsed_s)
    if not run.copied_back:
        return BuildOutcome(False, f"{script} finished, but {run.detail}", exit.elapsed_s)
    return BuildOutcome(True, f"{script} built the extension", exit.elapsed_s)
