"""Every kernel variant compiles with NVRTC, the compiler MLX and the op use on the GPU machine (no GPU needed).

Skipped where no NVRTC is found (the test extra installs it on x86-64 Linux; pagecheck/gpu/nvrtc_check.py).
"""

from __future__ import annotations

import pytest

from pagecheck.gpu import nvcc_check, nvrtc_check

SETUP = nvrtc_check.find_nvrtc()
pytestmark = pytest.mark.skipif(SETUP is None, reason="no NVRTC (the test extra installs it on x86-64 Linux)")


@pytest.fixture(scope="module")
def nvrtc() -> nvrtc_check.Nvrtc:
    return nvrtc_check.Nvrtc(SETUP)


def test_nvrtc_rejects_what_nvcc_accepts_a_generic_lambda_in_a_kernel(nvrtc):
    # The form the warpgroup prefill's walk first took (ext/kernels/NOTES.md v28): nvcc compiles it, NVRTC's JIT
    # mode takes the lambda's call operator for a host function.
    generic = """
struct Yes { static constexpr int value = 1; };
__global__ void kernel(int* out) {
  auto step = [&](int i, auto flag) { out[i] = decltype(flag)::value; };
  step(threadIdx.x, Yes{});
}
"""
    plain = """
__global__ void kernel(int* out) {
  auto step = [&](int i, int flag) { out[i] = flag; };
  step(threadIdx.x, 1);
}
"""
    ok, log = nvrtc.compile("generic_lambda", generic, "compute_90")
    assert not ok
    assert "host function" in log
    ok, log = nvrtc.compile("plain_lambda", plain, "compute_90")
    assert ok, log


WGMMA_VARIANTS = [v for v in nvcc_check.variants() if v.stem == nvcc_check.WGMMA_STEM]


@pytest.mark.parametrize("variant", WGMMA_VARIANTS, ids=lambda v: v.label.replace(" ", ","))
def test_the_warpgroup_prefill_compiles_with_nvrtc_as_the_op_builds_it(nvrtc, variant):
    arch, source = nvrtc_check.translation_unit(variant)
    assert arch == "compute_90a"
    ok, log = nvrtc.compile(variant.stem, source, arch)
    assert ok, log


def _first_of_each_stem() -> list[nvcc_check.Variant]:
    seen: dict[tuple[str, str], nvcc_check.Variant] = {}
    for variant in nvcc_check.variants():
        if variant.stem != nvcc_check.WGMMA_STEM:
            seen.setdefault((variant.stem, variant.dtype), variant)
    return list(seen.values())


@pytest.mark.parametrize("variant", _first_of_each_stem(), ids=lambda v: f"{v.stem}-{v.dtype}")
def test_every_wrapped_kernel_compiles_with_nvrtc(nvrtc, variant):
    arch, source = nvrtc_check.translation_unit(variant)
    assert "#include <cstdint>" not in source
    ok, log = nvrtc.compile(variant.stem, source, arch)
    assert ok, log


def test_the_check_reports_a_failing_variant(monkeypatch, capsys):
    broken = nvcc_check.Variant("paged_prefill_wgmma", "bfloat16", ())
    monkeypatch.setattr(nvrtc_check, "variants", lambda: [broken])
    monkeypatch.setattr(nvrtc_check, "translation_unit",
                        lambda variant: ("compute_90a", "__global__ void k() { this is not C++; }"))
    assert nvrtc_check.main([]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "0/1 variants compiled with NVRTC" in out
