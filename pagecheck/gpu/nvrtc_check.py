"""Compile the kernels' translation units with NVRTC, as MLX and the op do on the GPU machine, no GPU needed.

nvcc (pagecheck.gpu.nvcc_check) and NVRTC do not accept the same programs: NVRTC compiles in JIT mode, where a
function without an execution space is a host function and an error. A generic lambda's call operator is one:
nvcc compiles a kernel holding one, NVRTC rejects it, and where that kernel is the warpgroup prefill the op
quietly runs its fallback prefill. This program runs every variant of nvcc_check through NVRTC's front end
(PTX for compute_90, compute_90a for the warpgroup prefill, -std=c++17 as the op passes it): the warpgroup
prefill's translation unit exactly as the op builds it, the other kernels wrapped as nvcc_check wraps them, with
`<cuda/std/cstdint>` in place of `<cstdint>`, which NVRTC does not ship.

NVRTC comes from the `test` extra's wheels on x86-64 Linux (nvidia-cuda-nvrtc-cu12, with the runtime and CCCL
wheels for the headers that NVRTC version expects), or from PAGECHECK_NVRTC (a libnvrtc file) with
PAGECHECK_NVRTC_INCLUDE (header folders, separated by the path separator).

    python -m pagecheck.gpu.nvrtc_check [--jobs N] [--filter paged_prefill_wgmma]
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import importlib.util
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from pagecheck.arg_types import positive_int
from pagecheck.gpu.nvcc_check import PRELUDE, WGMMA_STEM, Variant, report, variants, wrap

# nvcc_check's prelude for NVRTC: the fixed-width integers from libcu++.
NVRTC_PRELUDE = PRELUDE.replace(
    "#include <cstdint>\n",
    "#include <cuda/std/cstdint>\n"
    + "".join(f"using cuda::std::{name};\n" for name in ("int8_t", "int32_t", "int64_t", "uint8_t", "uint16_t",
                                                         "uint32_t", "uint64_t")),
)
# The NVRTC wheels of the `test` extra: (package, what it holds).
WHEEL_PARTS = (("nvidia.cuda_nvrtc", "lib"), ("nvidia.cuda_runtime", "include"), ("nvidia.cuda_cccl", "include"))


def _package_dir(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except ModuleNotFoundError:
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


@dataclass(frozen=True)
class NvrtcSetup:
    library: str
    include_dirs: tuple[str, ...]


def find_nvrtc() -> NvrtcSetup | None:
    """PAGECHECK_NVRTC (with PAGECHECK_NVRTC_INCLUDE), else the `test` extra's NVRTC wheels, else None."""
    library = os.environ.get("PAGECHECK_NVRTC")
    if library:
        include = os.environ.get("PAGECHECK_NVRTC_INCLUDE", "")
        return NvrtcSetup(library, tuple(part for part in include.split(os.pathsep) if part))
    dirs = [_package_dir(package) for package, _ in WHEEL_PARTS]
    if any(d is None for d in dirs):
        return None
    libraries = sorted(glob.glob(str(dirs[0] / "lib" / "libnvrtc.so.*")))
    libraries = [path for path in libraries if "builtins" not in path and ".alt." not in path]
    if not libraries:
        return None
    return NvrtcSetup(libraries[0], tuple(str(d / "include") for d in dirs[1:]))


class Nvrtc:
    """NVRTC through ctypes: compile(name, source, arch) -> (ok, log)."""

    def __init__(self, setup: NvrtcSetup):
        self.setup = setup
        self._lib = ctypes.CDLL(setup.library)

    def version(self) -> str:
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
        return f"{major.value}.{minor.value}"

    def compile(self, name: str, source: str, arch: str) -> tuple[bool, str]:
        lib = self._lib
        program = ctypes.c_void_p()
        status = lib.nvrtcCreateProgram(ctypes.byref(program), source.encode(), f"{name}.cu".encode(), 0, None, None)
        if status != 0:
            return False, f"nvrtcCreateProgram failed with status {status}"
        try:
            options = [f"--include-path={d}".encode() for d in self.setup.include_dirs]
            options += [f"--gpu-architecture={arch}".encode(), b"-std=c++17"]
            status = lib.nvrtcCompileProgram(program, len(options), (ctypes.c_char_p * len(options))(*options))
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(program, ctypes.byref(size))
            log = ctypes.create_string_buffer(max(size.value, 1))
            lib.nvrtcGetProgramLog(program, log)
            return status == 0, log.value.decode(errors="replace")
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(program))


def translation_unit(variant: Variant) -> tuple[str, str]:
    """(architecture, source) NVRTC gets for `variant`."""
    arch = "compute_90a" if variant.stem == WGMMA_STEM else "compute_90"
    return arch, wrap(variant, prelude=NVRTC_PRELUDE)


def check(nvrtc: Nvrtc, variant: Variant) -> tuple[Variant, bool, str]:
    arch, source = translation_unit(variant)
    ok, log = nvrtc.compile(variant.stem, source, arch)
    return variant, ok, log


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=positive_int, default=2)
    parser.add_argument("--filter", default="", help="only variants whose label contains this text")
    args = parser.parse_args(argv)
    setup = find_nvrtc()
    if setup is None:
        print("NVRTC not found: install the test extra on x86-64 Linux (pip install -e '.[test]') or set "
              "PAGECHECK_NVRTC")
        return 2
    nvrtc = Nvrtc(setup)
    chosen = [v for v in variants() if args.filter in v.label]
    print(f"NVRTC {nvrtc.version()} ({setup.library}), {len(chosen)} variants")
    with ThreadPoolExecutor(args.jobs) as pool:
        return report(((v, ok, "" if ok else log) for v, ok, log in pool.map(lambda v: check(nvrtc, v), chosen)),
                      len(chosen), "NVRTC")


if __name__ == "__main__":
    sys.exit(main())
