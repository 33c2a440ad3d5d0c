"""Where a report was produced: machine, software versions, source revision, extension build."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def cpu_model() -> str:
    """The CPU's marketing name where the OS tells it, else the architecture."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:  # not Linux
        cpuinfo = ""
    for line in cpuinfo.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    if platform.system() == "Darwin":
        found = _run(["sysctl", "-n", "machdep.cpu.brand_string"])
        if found:
            return found
    return platform.processor() or platform.machine()


def pagecheck_version() -> str:
    try:
        return importlib.metadata.version("pagecheck")
    except importlib.metadata.PackageNotFoundError:
        pass
    pyproject = PROJECT_ROOT / "pyproject.toml"
    try:
        import tomllib
    except ImportError:  # Python 3.10 has no TOML reader
        return "unknown (not installed)"
    if pyproject.exists():
        version = tomllib.loads(pyproject.read_text()).get("project", {}).get("version", "unknown")
        return f"{version} (source tree, not installed)"
    return "unknown (not installed)"


def git_revision() -> dict[str, Any] | None:
    """Commit and dirty flag of the source tree pagecheck runs from, when it is a git checkout."""
    commit = _run(["git", "-C", str(PROJECT_ROOT), "rev-parse", "HEAD"])
    if not commit:
        return None
    status = _run(["git", "-C", str(PROJECT_ROOT), "status", "--porcelain", "--untracked-files=no"])
    return {"commit": commit, "dirty": bool(status)}


def extension_build() -> dict[str, Any] | str:
    """ext.build_info() when the C++ extension imports; otherwise why it does not."""
    try:
        import ext
    except Exception as exc:  # a missing or broken build is a fact worth reporting
        return f"not importable: {type(exc).__name__}: {exc}"
    build_info = getattr(ext, "build_info", None)
    if build_info is None:
        return "imported, but has no build_info()"
    return dict(build_info())


def mlx_devices() -> dict[str, Any]:
    import mlx.core as mx

    gpu = mx.is_available(mx.gpu)
    return {
        "default_device": str(mx.default_device()),
        "cpu": dict(mx.device_info(mx.cpu)),
        "gpu": dict(mx.device_info(mx.gpu)) if gpu else None,
        "gpu_backend": "metal" if mx.metal.is_available() else "cuda" if mx.cuda.is_available() else None,
    }


def collect_environment() -> dict[str, Any]:
    import mlx.core as mx
    import numpy as np

    return {
        "os": platform.platform(),
        "python": platform.python_version(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "mlx": mx.__version__,
        "numpy": np.__version__,
        "devices": mlx_devices(),
        "pagecheck": pagecheck_version(),
        "git": git_revision(),
        "extension": extension_build(),
    }


def _run(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""
