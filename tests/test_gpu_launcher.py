"""The Python launcher's host side, on any machine: each plan, pinned or not, becomes the launch it describes.

pagecheck/gpu/kernels.py asks the planner for every plan and only launches; here the compiled kernel is
replaced by a recorder, so the kernel, shared memory, template arguments, grid and outputs it would launch
with are checked against the plan without a GPU (tests/test_gpu_attention.py runs them on one).
"""

from __future__ import annotations

import itertools

from typing import Any

import mlx.core as mx
import pytest

from pagecheck import ext
from pagecheck.gpu import kernels as gpu_kernels
from pagecheck.gpu import nvcc_check as gpu_nvcc_check

BATCH, NUM_Q_HEADS, NUM_KV_HEADS, HEAD_DIM, PAGE_SIZE, WIDTH = 2, 8, 2, 64, 16, 6

# (query length, dtype, pins): every schedule, both decode walks, a deeper ring, bulk copies.
LAUNCHES: dict[str, tuple[int, str, dict[str, Any]]] = {
    "automatic decode": (1, "bfloat16", {}),
    "one pass on CUDA cores": (2, "float16", dict(schedule="paged_decode", tensor_cores=False)),
    "split on tensor cores": (1, "bfloat16", dict(schedule="paged_decode_split", splits=3, mma_stages=4)),
    "split with bulk copies": (3, "float16", dict(schedule="paged_decode_split", splits=2, bulk=True)),
    "split on float32": (1, "float32", dict(splits=5)),
    "automatic prefill": (12, "bfloat16", {}),
    "prefill on CUDA cores": (12, "float16", dict(schedule="paged_prefill")),
}


@pytest.fixture(autouse=True)
def mma_sync_prefill(monkeypatch) -> None:
    # The recorded launches are those of MLX's JIT (fast::cuda_kernel): on a device with warpgroup MMA the
    # automatic prefill would be the warpgroup kernel, which test_the_warpgroup_prefill_launch_is_the_plans
    # records instead.
    monkeypatch.setattr(ext, "gpu_warpgroup_mma", lambda: False)


class Recorder:
    """Stands in for gpu_kernels.compiled: records each launch and returns its filled output."""

    def __init__(self) -> None:
        self.launches: list[dict[str, Any]] = []

    def __call__(self, stem: str, shared_bytes: int) -> Any:
        def launch(**kwargs: Any) -> tuple[mx.array]:
            self.launches.append({"stem": stem, "shared_bytes": shared_bytes, **kwargs})
            return (mx.full(kwargs["output_shapes"][0], kwargs["init_value"], dtype=kwargs["output_dtypes"][0]),)

        return launch


def inputs(query_len: int, dtype: str) -> dict[str, Any]:
    num_pages = BATCH * WIDTH
    pages = mx.zeros((num_pages, NUM_KV_HEADS, PAGE_SIZE, HEAD_DIM), dtype=getattr(mx, dtype))
    return {
        "query": mx.zeros((BATCH, NUM_Q_HEADS, query_len, HEAD_DIM), dtype=getattr(mx, dtype)),
        "key_pages": pages,
        "value_pages": pages,
        "block_table": mx.arange(num_pages, dtype=mx.int32).reshape(BATCH, WIDTH),
        "context_lens": mx.array([PAGE_SIZE * WIDTH, 40], dtype=mx.int32),
        "page_size": PAGE_SIZE,
    }


@pytest.mark.parametrize("name", sorted(LAUNCHES))
def test_the_launch_is_the_plans(monkeypatch, name: str) -> None:
    query_len, dtype, pins = LAUNCHES[name]
    recorder = Recorder()
    monkeypatch.setattr(gpu_kernels, "compiled", recorder)
    args = inputs(query_len, dtype)
    got = gpu_kernels.paged_attention(**args, mask="causal", poison_output=True, **pins)
    plan = ext.gpu_launch_plan(BATCH, NUM_Q_HEADS, query_len, HEAD_DIM, NUM_KV_HEADS, PAGE_SIZE, WIDTH, dtype,
                               **pins)
    (launch,) = recorder.launches
    threads = ext.gpu_plan_constants()["threads_per_block"]
    split = plan["schedule"] == "paged_decode_split"
    assert (launch["stem"], launch["shared_bytes"]) == (plan["schedule"], plan["shared_bytes"])
    assert launch["grid"] == (threads * plan["blocks"], plan["splits"] if split else 1, 1)
    assert launch["threadgroup"] == (threads, 1, 1)
    assert launch["output_shapes"] == [(plan["scratch_words"],) if split else args["query"].shape]
    assert launch["output_dtypes"] == [mx.float32 if split else getattr(mx, dtype)]
    template = dict(launch["template"])
    assert template["T"] == getattr(mx, dtype) and template["HEAD_DIM"] == HEAD_DIM and template["CAUSAL"]
    if plan["schedule"].startswith("paged_decode"):
        walk = ("rows", "mma", "mma_stages", "bulk", "swizzled_rows")
        assert [template[key] for key in ("ROWS", "MMA", "MMA_STAGES", "MMA_BULK", "MMA_SWIZZLE")] == [
            plan[key] for key in walk]
    if plan["schedule"] == "paged_prefill_mma":
        assert template["KEY_TILE"] == plan["key_tile"]
    # The output is the launch's own, poisoned (nothing ran): for the split decode the view of the scratch's
    # out region (test_gpu_plan_agreement checks that view), whose float32 NaN fill reads as NaN and 0 halves
    # in a 16-bit dtype.
    fill = mx.full(launch["output_shapes"][0], float("nan"), dtype=launch["output_dtypes"][0])
    want = gpu_kernels.split_output(fill, plan, args["query"].shape, getattr(mx, dtype)) if split else fill
    assert got.shape == args["query"].shape and got.dtype == getattr(mx, dtype)
    assert mx.array_equal(got, want, equal_nan=True).item()


@pytest.mark.parametrize("name", sorted(LAUNCHES))
def test_the_template_names_are_the_kernels(monkeypatch, name: str) -> None:
    # The names the launcher passes are those the nvcc check compiles the same kernel with (its variants
    # state every template parameter the body needs), in the same order.
    query_len, dtype, pins = LAUNCHES[name]
    recorder = Recorder()
    monkeypatch.setattr(gpu_kernels, "compiled", recorder)
    gpu_kernels.paged_attention(**inputs(query_len, dtype), **pins)
    (launch,) = recorder.launches
    compiled_names = {("T", *(key for key, _ in variant.template)) for variant in gpu_nvcc_check.variants()
                      if variant.stem == launch["stem"]}
    assert compiled_names == {tuple(key for key, _ in launch["template"])}


def test_a_bad_pin_raises_before_any_launch(monkeypatch) -> None:
    recorder = Recorder()
    monkeypatch.setattr(gpu_kernels, "compiled", recorder)
    with pytest.raises(ValueError, match="splits = 5 needs schedule = paged_decode_split"):
        gpu_kernels.paged_attention(**inputs(1, "bfloat16"), schedule="paged_decode", splits=5)
    with pytest.raises(ValueError, match="tensor_cores = true needs the tensor-core kernels"):
        gpu_kernels.paged_attention(**inputs(1, "float32"), tensor_cores=True)
    assert recorder.launches == []


def test_every_run_the_harness_pins_is_a_plan_the_planner_takes() -> None:
    # The harness runs on a CUDA machine only; its pins are checked here, where a refused one would otherwise
    # surface first on the device. Runs that need the tensor-core kernels are skipped where those do not take
    # the case, as the harness skips them.
    from pagecheck.gpu import harness as gpu_harness

    # The warpgroup prefill's runs are planned as on a device with warpgroup MMA, in each block height.
    planned = 0
    for case in gpu_harness.decode_cases() + gpu_harness.prefill_cases():
        for schedule, splits, tensor_cores in case.runs:
            needs_mma = tensor_cores or schedule == gpu_harness.PREFILL_MMA
            if needs_mma and not ext.gpu_takes_tensor_cores(case.head_dim, case.dtype):
                continue
            wgmma = schedule == gpu_harness.PREFILL_WGMMA
            if wgmma and not ext.gpu_takes_warpgroup_mma(case.head_dim, case.dtype):
                continue
            blocks = gpu_harness.WGMMA_BLOCKS if wgmma else ((None, None),)
            for bulk, (warpgroups, producer) in itertools.product((False, True), blocks):
                ext.gpu_launch_plan(len(case.contexts), case.group * case.num_kv_heads, case.num_queries,
                                    case.head_dim, case.num_kv_heads, case.page_size,
                                    -(-max(case.contexts) // case.page_size), case.dtype, schedule=schedule,
                                    splits=splits, tensor_cores=tensor_cores, bulk=bulk, warpgroup_mma=wgmma,
                                    warpgroups=warpgroups, producer_registers=producer)
                planned += 1
    assert planned > 100


def test_the_warpgroup_prefill_launch_is_the_plans(monkeypatch) -> None:
    # As a device with warpgroup MMA would run it: the kernel the extension compiles for the plan's variant,
    # launched through mx.fast.precompiled_cuda_kernel with the plan's grid, block and shared memory, and the
    # shapes as int scalars.
    monkeypatch.setattr(ext, "gpu_warpgroup_mma", lambda: True)
    compiled: list[tuple[Any, ...]] = []
    launches: list[dict[str, Any]] = []

    def kernel(*args: Any) -> tuple[str, bytes, str]:
        compiled.append(args)
        return "wgmma_variant", b"\x7fELF image", "cubin"

    def precompiled(**kwargs: Any) -> list[mx.array]:
        launches.append(kwargs)
        return [mx.full(kwargs["output_shapes"][0], kwargs["init_value"], dtype=kwargs["output_dtypes"][0])]

    monkeypatch.setattr(ext, "gpu_prefill_wgmma_kernel", kernel)
    monkeypatch.setattr(gpu_kernels.mx.fast, "precompiled_cuda_kernel", precompiled)
    args = inputs(12, "bfloat16")
    got = gpu_kernels.paged_attention(**args, mask="causal", scale=-0.5, poison_output=True, warpgroups=3)
    plan = ext.gpu_launch_plan(BATCH, NUM_Q_HEADS, 12, HEAD_DIM, NUM_KV_HEADS, PAGE_SIZE, WIDTH, "bfloat16",
                               warpgroup_mma=True, warpgroups=3)
    assert plan["schedule"] == "paged_prefill_wgmma"
    half_bits = 0x3F000000  # 0.5
    assert compiled == [("bfloat16", HEAD_DIM, plan["key_tile"], plan["mma_stages"], 3, True, 0, half_bits, True, 0)]
    (launch,) = launches
    assert (launch["name"], launch["compiled_source"]) == ("wgmma_variant", b"\x7fELF image")
    assert launch["grid"] == (plan["threads"] * plan["blocks"], 1, 1)
    assert launch["threadgroup"] == (plan["threads"], 1, 1) == (384, 1, 1)
    assert launch["shared_memory"] == plan["shared_bytes"]
    assert launch["scalars"] == [BATCH, NUM_Q_HEADS, 12, HEAD_DIM, BATCH * WIDTH, NUM_KV_HEADS, PAGE_SIZE, WIDTH]
    assert launch["output_shapes"] == [args["query"].shape] and launch["ensure_row_contiguous"]
    assert got.shape == args["query"].shape and mx.isnan(got).all().item()


def test_a_negative_scale_is_a_magnitude_and_a_sign() -> None:
    # MLX names a kernel after its template arguments; a minus sign there does not compile.
    assert gpu_kernels.scale_bits(0.125) == (0x3E000000, False)
    assert gpu_kernels.scale_bits(-0.125) == (0x3E000000, True)
    assert gpu_kernels.scale_bits(-0.0) == (0, True)
