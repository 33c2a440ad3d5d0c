"""The GPU kernels against the float64 reference, through the C++ op and through the launcher.

Every schedule is reached: one-pass and split decode on both decode walks,
tensor-core and CUDA-core prefill, and dense attention (which runs the paged
kernels over one page per request). Needs an MLX CUDA device; CI has none, so
there the whole module is skipped with that reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from pagecheck.reference.layouts import random_layout
from pagecheck.reference.tolerance import compare

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not mx.cuda.is_available(), reason="needs an MLX CUDA device (mlx[cuda13]); CI runs on CPU only"
    ),
]

# (dtype, contexts, page_size, num_queries, group, head_dim, mask): one row per schedule family.
CASES = [
    ("bfloat16", (0, 1, 37, 300), 16, 1, 4, 128, None),  # decode, tensor cores
    ("float16", (5, 700), 16, 3, 2, 64, "causal"),  # decode, tensor cores, causal
    ("float32", (0, 2, 130, 517), 16, 2, 2, 128, "causal"),  # decode, CUDA cores
    ("bfloat16", (9000,), 128, 1, 4, 128, None),  # split decode (one request, long context)
    ("float32", (6000,), 16, 1, 8, 96, None),  # split decode, CUDA cores
    ("bfloat16", (0, 40, 333), 16, 40, 2, 128, "causal"),  # prefill, tensor cores
    ("float32", (20, 300), 5, 20, 4, 5, "causal"),  # prefill, CUDA cores, odd dims
]


def layout_for(seed: int, dtype: str, contexts: tuple[int, ...], page_size: int, num_queries: int,
               group: int, head_dim: int, mask: str | None) -> object:
    return random_layout(
        np.random.default_rng(seed), context_lens=contexts, page_size=page_size, num_queries=num_queries,
        num_q_heads=2 * group, num_kv_heads=2, head_dim=head_dim, dtype=dtype, mask=mask,
    )


@pytest.mark.invariant("matches_reference")
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-L{c[3]}-G{c[4]}-D{c[5]}-page{c[2]}")
def test_op_on_gpu_matches_reference(case: tuple) -> None:
    from pagecheck import impl

    layout = layout_for(1, *case)
    with mx.stream(mx.gpu):
        got = impl.paged_attention(**layout.as_mx())
        mx.eval(got)
    result = compare(got, layout.reference_output(), layout.dtype)
    assert result.passed, f"{layout.describe()}\n{result.summary()}"


@pytest.mark.invariant("matches_reference")
@pytest.mark.parametrize("scale", [-0.3, 0.0])
@pytest.mark.parametrize("case", [CASES[0], CASES[2], CASES[5], CASES[6]], ids=["decode-mma", "decode-lanes",
                                                                             "prefill-mma", "prefill-lanes"])
def test_op_on_gpu_takes_any_finite_scale(case: tuple, scale: float) -> None:
    # A negative scale once made every GPU kernel fail to compile (a minus sign in MLX's kernel name); a
    # zero scale weighs every visible key alike.
    from pagecheck import impl

    layout = layout_for(3, *case)
    with mx.stream(mx.gpu):
        got = impl.paged_attention(**layout.as_mx(), scale=scale)
        mx.eval(got)
    result = compare(got, layout.reference_output(scale), layout.dtype)
    assert result.passed, f"scale={scale} {layout.describe()}\n{result.summary()}"


@pytest.mark.invariant("matches_reference")
@pytest.mark.parametrize("schedule, splits, mma", [
    ("paged_decode", None, False), ("paged_decode", None, True), ("paged_decode_split", 5, False),
    ("paged_decode_split", 5, True), ("paged_prefill", None, None), ("paged_prefill_mma", None, None),
    ("paged_prefill_wgmma", None, None),
])
def test_each_schedule_matches_reference(schedule: str, splits: int | None, mma: bool | None) -> None:
    from pagecheck import ext
    from pagecheck.gpu import kernels as gpu_kernels

    if schedule == "paged_prefill_wgmma" and not ext.gpu_warpgroup_mma():
        pytest.skip("the warpgroup prefill needs a GPU of compute capability 9.0")
    layout = layout_for(2, "bfloat16", (0, 3, 70, 650), 16, 3, 4, 64, "causal")
    got = gpu_kernels.paged_attention(
        **layout.as_mx(), schedule=schedule, splits=splits, tensor_cores=mma, poison_output=True
    )
    result = compare(got, layout.reference_output(), layout.dtype)
    assert result.passed, f"{schedule} {splits} {mma}: {layout.describe()}\n{result.summary()}"


@pytest.mark.invariant("matches_reference")
@pytest.mark.parametrize("num_queries", [1, 12])
@pytest.mark.parametrize("with_lens", [True, False])
def test_dense_attention_on_gpu_matches_reference(num_queries: int, with_lens: bool) -> None:
    from pagecheck import ext
    from pagecheck.reference.attention import dense_attention

    rng = np.random.default_rng(3)
    query = rng.standard_normal((2, 8, num_queries, 64)).astype(np.float32)
    key = rng.standard_normal((2, 2, 50, 64)).astype(np.float32)
    value = rng.standard_normal((2, 2, 50, 64)).astype(np.float32)
    lens = np.array([50, 17], dtype=np.int32) if with_lens else None
    with mx.stream(mx.gpu):
        got = ext.dense_attention(
            mx.array(query), mx.array(key), mx.array(value), None, True, None if lens is None else mx.array(lens)
        )
        mx.eval(got)
    want = dense_attention(query, key, value, mask="causal", context_lens=lens)
    result = compare(got, want, "float32")
    assert result.passed, result.summary()


def test_dense_attention_on_gpu_under_shapeless_compile() -> None:
    # The dense view holds no shape-dependent constant (no arange over the
    # batch), so a graph compiled for one batch size stays right for another.
    from pagecheck import ext

    rng = np.random.default_rng(4)
    compiled = mx.compile(lambda q, k, v: ext.dense_attention(q, k, v, None, False), shapeless=True)
    with mx.stream(mx.gpu):
        for batch in (1, 3):
            q, k, v = (mx.array(rng.standard_normal(s).astype(np.float32))
                       for s in [(batch, 4, 1, 32), (batch, 2, 40, 32), (batch, 2, 40, 32)])
            got = compiled(q, k, v)
            want = ext.dense_attention(q, k, v, None, False)
            np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-6, atol=1e-6)


def run_child(script: str, env_changes: dict[str, str | None], timeout: int) -> subprocess.CompletedProcess:
    """`script` in a Python process of its own, from the repository root (so it imports this module as
    tests.test_gpu_attention), with `env_changes` applied to this environment (None removes a name)."""
    env = dict(os.environ)
    for name, value in env_changes.items():
        env.pop(name, None)
        if value is not None:
            env[name] = value
    return subprocess.run([sys.executable, "-c", script], env=env, cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, timeout=timeout)


WGMMA_IMAGE_CHILD = """
from pagecheck import ext
from pagecheck.gpu import kernels as gpu_kernels
from pagecheck.reference.tolerance import compare
from tests.test_gpu_attention import layout_for
_, image, image_format = ext.gpu_prefill_wgmma_kernel("bfloat16", 64, 64, 2, 2, True, 0, 0x3E000000, False)
layout = layout_for(2, "bfloat16", (0, 3, 70, 650), 16, 3, 4, 64, "causal")
got = gpu_kernels.paged_attention(**layout.as_mx(), schedule="paged_prefill_wgmma", poison_output=True)
result = compare(got, layout.reference_output(), layout.dtype)
print(image_format, image[:4].hex(), result.passed)
"""


@pytest.mark.parametrize("asked, image_format, magic", [(None, "cubin", "7f454c46"), ("ptx", "ptx", "")])
def test_the_warpgroup_prefill_image_is_a_cubin_unless_ptx_is_asked(asked: str | None, image_format: str,
                                                                      magic: str) -> None:
    # The environment is read at a variant's first use, so each format runs in a process of its own.
    from pagecheck import ext

    if not ext.gpu_warpgroup_mma():
        pytest.skip("the warpgroup prefill needs a GPU of compute capability 9.0")
    done = run_child(WGMMA_IMAGE_CHILD, {"PAGECHECK_WGMMA_IMAGE": asked}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    got_format, head, passed = done.stdout.split()[-3:]
    assert got_format == image_format
    assert head == magic if magic else head != "7f454c46"  # an ELF image, or text
    assert passed == "True"


REUSED_NODES_CHILD = """
import mlx.core as mx
from pagecheck import ext, impl
from pagecheck.reference.tolerance import compare
from tests.test_gpu_attention import CASES, layout_for
assert ext.reuse_kernel_nodes()
failures = []
for seed in (1, 2):  # a second layout per case: the kept primitives run on other inputs
    for case in (CASES[0], CASES[3], CASES[5], CASES[6]):  # decode, split decode, both prefill families
        layout = layout_for(seed, *case)
        for _ in range(3):
            with mx.stream(mx.gpu):
                got = impl.paged_attention(**layout.as_mx())
                mx.eval(got)
            result = compare(got, layout.reference_output(), layout.dtype)
            if not result.passed:
                failures.append(layout.describe())
print(*failures[:3], sep="\\n")
print("failures", len(failures))
"""


def test_kept_kernel_primitives_match_the_reference() -> None:
    # PAGECHECK_REUSE_KERNEL_NODES=1 keeps each kernel's MLX primitive across calls (an experiment: such a
    # cache crashed once on the H200), so it runs in a process of its own: a crash fails this test only.
    done = run_child(REUSED_NODES_CHILD, {"PAGECHECK_REUSE_KERNEL_NODES": "1"}, timeout=600)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-3000:]}"
    assert done.stdout.strip().splitlines()[-1] == "failures 0", done.stdout[-2000:]


@pytest.mark.invariant("matches_reference")
@pytest.mark.parametrize("case", [CASES[0], CASES[2], CASES[5], CASES[6]], ids=["decode-mma", "decode-lanes",
                                                                              "prefill-mma", "prefill-lanes"])
def test_outputs_without_a_fill_are_written_whole_over_recycled_nan_memory(case: tuple) -> None:
    # The single-pass decode and the prefills get no output fill on CUDA: their buffer is whatever MLX's
    # cache hands back. Buffers of the output's size are filled with NaN and freed first, so an element no
    # thread writes stays NaN and fails the comparison.
    from pagecheck import impl

    layout = layout_for(5, *case)
    want = layout.reference_output()
    arrays = layout.as_mx()
    mx.eval([value for value in arrays.values() if isinstance(value, mx.array)])
    with mx.stream(mx.gpu):
        for _ in range(3):
            poisoned = mx.full(arrays["query"].shape, mx.nan, dtype=arrays["query"].dtype)
            mx.eval(poisoned)
            del poisoned
            got = impl.paged_attention(**arrays)
            mx.eval(got)
            assert not mx.any(mx.isnan(got)).item(), f"unwritten elements: {layout.describe()}"
            result = compare(got, want, layout.dtype)
            assert result.passed, f"{layout.describe()}\n{result.summary()}"
            del got
