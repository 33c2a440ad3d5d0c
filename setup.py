"""Build the C++ MLX extension (ext/_ext) with CMake.

`python setup.py build_ext --inplace` builds it next to ext/__init__.py; a wheel
build places it in build_lib; a PEP 660 editable install copies it in place.
setuptools handles all three through get_ext_fullpath, so one build step serves
them.

PAGECHECK_PORTABLE=1 builds without -march=native (for a wheel meant for other
machines); the default tunes for the building machine.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
TRUE_WORDS = ("1", "true", "yes", "on")


class CMakeExtension(Extension):
    """An extension whose sources CMake compiles, rooted at one CMakeLists.txt."""

    def __init__(self, name: str, cmake_dir: Path) -> None:
        super().__init__(name, sources=[])
        self.cmake_dir = cmake_dir


def mlx_prefix() -> str:
    """Where the mlx package lives, found without importing mlx.core.

    Importing mlx.core would load its native backend, which on a CUDA wheel needs
    libraries a build machine may not have.
    """
    spec = importlib.util.find_spec("mlx")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pagecheck: the mlx package is not installed; install mlx[cpu]")
    prefix = Path(list(spec.submodule_search_locations)[0])
    if not (prefix / "share" / "cmake" / "MLX").is_dir():
        raise RuntimeError(
            f"pagecheck: {prefix} has no CMake files; the plain mlx wheel on Linux lacks "
            "them, install mlx[cpu] or mlx[cuda13]"
        )
    return str(prefix)


def nanobind_cmake_dir() -> str:
    return subprocess.check_output(
        [sys.executable, "-m", "nanobind", "--cmake_dir"], text=True
    ).strip()


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        if not isinstance(ext, CMakeExtension):
            super().build_extension(ext)
            return
        module_path = Path(self.get_ext_fullpath(ext.name)).resolve()
        module_path.parent.mkdir(parents=True, exist_ok=True)
        portable = os.environ.get("PAGECHECK_PORTABLE", "").lower() in TRUE_WORDS
        mlx_root = mlx_prefix()
        # CMake caches where it found MLX and Python: a build tree per
        # (interpreter, MLX, portability) keeps an isolated build from reusing
        # another environment's answers.
        key = hashlib.sha256(f"{sys.executable}|{mlx_root}|{portable}".encode()).hexdigest()[:12]
        build_dir = Path(self.build_temp).resolve() / f"cmake-{key}"
        build_dir.mkdir(parents=True, exist_ok=True)
        configure = [
            "cmake",
            "-S",
            str(ext.cmake_dir),
            "-B",
            str(build_dir),
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-DMLX_ROOT={mlx_root}",
            f"-Dnanobind_ROOT={nanobind_cmake_dir()}",
            f"-DPAGECHECK_PORTABLE={'ON' if portable else 'OFF'}",
            f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={module_path.parent}",
        ]
        subprocess.run(configure, check=True)
        jobs = str(os.cpu_count() or 1)
        subprocess.run(
            ["cmake", "--build", str(build_dir), "--target", "_ext", "--parallel", jobs],
            check=True,
        )
        built = module_path.parent / module_path.name
        if not built.exists():
            raise RuntimeError(f"pagecheck: CMake did not produce {built}")


setup(
    ext_modules=[CMakeExtension("pagecheck.ext._ext", ROOT / "ext")],
    cmdclass={"build_ext": CMakeBuild},
)
