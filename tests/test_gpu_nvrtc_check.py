"""Every kernel variant compiles with NVRTC, the compiler MLX and the op use on the GPU machine (no GPU needed).

Skipped where no NVRTC is found (the test extra installs it on x86-64 Linux; pagecheck/gpu/nvrtc_check.py). The
compiles run in one child process: a test process that loaded NVRTC would change what the op does (it uses an
NVRTC it finds loaded, tests/test_kernel_header_file.py).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pagecheck.gpu import nvcc_check, nvrtc_check

SETUP = nvrtc_check.find_nvrtc()
pytestmark = pytest.mark.skipif(SETUP is None, reason="no NVRTC (the test extra installs it on x86-64 Linux)")

# Reads [[label, arch, source], ...] on stdin, writes [[label, compiled, log], ...].
CHILD = """
import json, sys
from pagecheck.gpu import nvrtc_check
nvrtc = nvrtc_check.Nvrtc(nvrtc_check.find_nvrtc())
json.dump([[label, *nvrtc.compile("unit", source, arch)] for label, arch, source in json.load(sys.stdin)], sys.stdout)
"""

# A generic lambda in a kernel: nvcc compiles it, NVRTC's JIT mode takes the lambda's call operator for a host
# function.
GENERIC_LAMBDA = """
struct Yes { static constexpr int value = 1; };
__global__ void kernel(int* out) {
  auto step = [&](int i, auto flag) { out[i] = decltype(flag)::value; };
  step(threadIdx.x, Yes{});
}
"""
PLAIN_LAMBDA = """
__global__ void kernel(int* out) {
  auto step = [&](int i, int flag) { out[i] = flag; };
  step(threadIdx.x, 1);
}
"""

WGMMA_VARIANTS = [v for v in nvcc_check.variants() if v.stem == nvcc_check.WGMMA_STEM]


def _first_of_each_stem() -> list[nvcc_check.Variant]:
    seen: dict[tuple[str, str], nvcc_check.Variant] = {}
    for variant in nvcc_check.variants():
        if variant.stem != nvcc_check.WGMMA_STEM:
            seen.setdefault((variant.stem, variant.dtype), variant)
    return list(seen.values())


WRAPPED_VARIANTS = _first_of_each_stem()


@pytest.fixture(scope="module")
def compiled() -> dict[str, tuple[bool, str]]:
    units = [["generic lambda", "compute_90", GENERIC_LAMBDA], ["plain lambda", "compute_90", PLAIN_LAMBDA]]
    units += [[v.label, *nvrtc_check.translation_unit(v)] for v in WGMMA_VARIANTS + WRAPPED_VARIANTS]
    result = subprocess.run([sys.executable, "-c", CHILD], input=json.dumps(units), capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return {label: (ok, log) for label, ok, log in json.loads(result.stdout)}


def test_nvrtc_rejects_what_nvcc_accepts_a_generic_lambda_in_a_kernel(compiled):
    ok, log = compiled["generic lambda"]
    assert not ok and "host function" in log
    ok, log = compiled["plain lambda"]
    assert ok, log


@pytest.mark.parametrize("variant", WGMMA_VARIANTS, ids=lambda v: v.label.replace(" ", ","))
def test_the_warpgroup_prefill_compiles_with_nvrtc_as_the_op_builds_it(compiled, variant):
    assert nvrtc_check.translation_unit(variant)[0] == "compute_90a"
    ok, log = compiled[variant.label]
    assert ok, log


@pytest.mark.parametrize("variant", WRAPPED_VARIANTS, ids=lambda v: f"{v.stem}-{v.dtype}")
def test_every_wrapped_kernel_compiles_with_nvrtc(compiled, variant):
    assert "#include <cstdint>" not in nvrtc_check.translation_unit(variant)[1]
    ok, log = compiled[variant.label]
    assert ok, log


def test_the_check_reports_a_failing_variant(monkeypatch, capsys):
    class Failing:
        def __init__(self, setup):
            self.setup = setup

        def version(self) -> str:
            return "0.0"

        def compile(self, name, source, arch):
            return False, f"{name}.cu(1): error: not C++"

    monkeypatch.setattr(nvrtc_check, "Nvrtc", Failing)
    monkeypatch.setattr(nvrtc_check, "variants", lambda: WRAPPED_VARIANTS[:2])
    assert nvrtc_check.main([]) == 1
    out = capsys.readouterr().out
    assert out.count("FAIL") == 2 and "error: not C++" in out and "0/2 variants compiled with NVRTC" in out
