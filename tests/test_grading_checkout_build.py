"""What grading needs to build a tiny-llm checkout's extension: the build tools, and only sources staged."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import sys
import tomllib
from pathlib import Path

from pagecheck.grading.sandboxed_command import SYSTEM_BIN_PATH, build_path
from pagecheck.grading.submission import Submission, find_kind, stage_copy, submission_name

ROOT = Path(__file__).resolve().parent.parent


def _pins(requirements: list[str], package: str) -> list[str]:
    return [text for text in requirements if text.split("[")[0].split("=")[0].split(">")[0].strip() == package]


def test_nanobind_is_a_runtime_dependency_pinned_as_the_build_pins_it() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    runtime, build = project["project"]["dependencies"], project["build-system"]["requires"]
    assert _pins(runtime, "nanobind") == _pins(build, "nanobind") == ["nanobind==3.1.0"]
    assert _pins(runtime, "mlx") == _pins(build, "mlx")  # the pair nanobind 3.1.0 goes with
    assert _pins(runtime, "cmake") and _pins(runtime, "setuptools")
    assert importlib.metadata.version("nanobind") == "3.1.0"


def test_the_build_finds_the_interpreters_own_build_tools() -> None:
    # The sandboxed build's PATH: this interpreter's scripts (pip's cmake), then the system's folders.
    scripts = str(Path(sys.executable).parent)
    assert build_path().split(os.pathsep) == [scripts, *SYSTEM_BIN_PATH.split(os.pathsep)]
    assert shutil.which("cmake", path=build_path()) is not None


def test_a_checkouts_compiled_extension_is_not_staged(tmp_path: Path) -> None:
    checkout = tmp_path / "tiny-llm"
    sources = {
        "src/tiny_llm/__init__.py": "",
        "src/extensions/build.py": "",
        "src/extensions/src/paged_attention.cpp": "",
        "src/extensions/tiny_llm_ext/__init__.py": "",
    }
    leftovers = (
        "src/extensions/tiny_llm_ext/_ext.cpython-311-x86_64-linux-gnu.so",
        "src/extensions/tiny_llm_ext/libtiny_llm_ext.so",
        "src/extensions/tiny_llm_ext/libtiny_llm_ext.dylib",
        "src/extensions/tiny_llm_ext/tiny_llm_ext.metallib",
    )
    for relative in [*sources, *leftovers]:
        path = checkout / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("a binary the student's own build left behind")
    submission = Submission(name=submission_name(checkout), path=checkout, kind=find_kind(checkout))
    root = stage_copy(submission, tmp_path / "staged")
    staged = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    assert staged == sorted(sources)
