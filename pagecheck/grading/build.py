"""Building a tiny-llm checkout's C++ extension inside its staged copy.

tiny-llm keeps the extension in src/extensions and builds it in place with
`python build.py` (older checkouts: `python setup.py build_ext --inplace`).
The build runs under the same limits as the suite (its own timeout) and its
output goes to a log the grader keeps. It uses the grader's own interpreter and
build tools (mlx, nanobind pinned with it, CMake: pagecheck's dependencies), so
the module it builds matches the mlx the suite imports; the interpreter's
scripts directory comes first on PATH so a pip-installed `cmake` is found even
when the grader's environment is not activated. A failed build is not yet a verdict:
the subject may not need the extension, which the first suite pass finds out.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from pagecheck.grading.sandbox import LiveChildren, Limits, run_limited

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


def build_environment(env: dict[str, str]) -> dict[str, str]:
    """`env` with the running interpreter's scripts directory (where pip puts cmake) first on PATH."""
    scripts = str(Path(sys.executable).parent)
    path = env.get("PATH", "")
    return {**env, "PATH": os.pathsep.join([scripts, path]) if path else scripts}


def build_extension(
    root: Path, command: list[str], *, env: dict[str, str], limits: Limits, log_path: Path, live: LiveChildren | None
) -> BuildOutcome:
    build_env = build_environment(env)
    exit = run_limited(command, cwd=root / EXTENSION_DIR, env=build_env, limits=limits, log_path=log_path, live=live)
    script = Path(command[1]).name
    if exit.timed_out:
        return BuildOutcome(False, f"{script} timed out after {limits.timeout_s:g} s", exit.elapsed_s)
    if exit.returncode != 0:
        how = exit.signal_name or f"exit status {exit.returncode}"
        return BuildOutcome(False, f"{script} failed ({how})", exit.elapsed_s)
    return BuildOutcome(True, f"{script} built the extension", exit.elapsed_s)
