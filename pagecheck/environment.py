"""Where a report was produced: machine, software versions, where pagecheck was installed from, extension build."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

DISTRIBUTION = "pagecheck"
FILE_URL = "file://"


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
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def install_source() -> dict[str, Any] | None:
    """Where the installed pagecheck came from, by its distribution's PEP 610 record (direct_url.json).

    None when pagecheck is not an installed distribution, or was installed from an index (no record).
    `commit` is the VCS commit the record names; for an editable install, whose code runs from the local
    folder itself, it is that folder's git HEAD, with `dirty` saying whether its tracked files had changes
    (a plain install of a folder copied the code, so the folder's HEAD now says nothing about it: null).
    """
    # Every record of the name is read: a build's pagecheck.egg-info in the working directory can
    # precede the installed dist-info on sys.path, and only an installer writes direct_url.json.
    records = (dist.read_text("direct_url.json") for dist in importlib.metadata.distributions(name=DISTRIBUTION))
    record = next((text for text in records if text), None)
    if not record:
        return None
    try:
        direct = json.loads(record)
    except json.JSONDecodeError:
        return None
    url = str(direct.get("url", ""))
    source: dict[str, Any] = {
        "url": url,
        "editable": bool(direct.get("dir_info", {}).get("editable", False)),
        "commit": direct.get("vcs_info", {}).get("commit_id"),
        "dirty": None,
    }
    if source["commit"] is None and source["editable"] and url.startswith(FILE_URL):
        folder = url[len(FILE_URL) :]
        commit = _run(["git", "-C", folder, "rev-parse", "HEAD"])
        if commit:
            status = _run(["git", "-C", folder, "status", "--porcelain", "--untracked-files=no"])
            source["commit"], source["dirty"] = commit, bool(status)
    return source


def extension_build() -> dict[str, Any] | str:
    """ext.build_info() when the C++ extension imports; otherwise why it does not."""
    try:
        from pagecheck import ext
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
        "source": install_source(),
        "extension": extension_build(),
    }


def _run(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""
