"""The Python launcher plans every GPU call exactly as the C++ op does (no GPU needed).

pagecheck/gpu_kernels.py mirrors ext/src/common/gpu_plan.cpp so that the checks and the
benchmark can pin a schedule; a constant changed on one side only would make the benchmark
time a launch the op never takes.
"""

from __future__ import annotations

import itertools

import mlx.core as mx
import pytest

from pagecheck import ext
from pagecheck.gpu import kernels as gpu_kernels

SCHEDULES = {"paged_decode": "decode", "paged_decode_split": "split", "paged_prefill": "prefill",
             "paged_prefill_mma": "prefill_mma"}
HEADS = ((32, 8), (8, 8), (12, 4), (6, 2))
DTYPES = ("bfloat16", "float16", "float32")


def shapes():
    for batch, (h_q, h_kv), query_len, head_dim, page_size, pages in itertools.product(
        (1, 3, 16, 64), HEADS, (1, 3, 8, 9, 64), (5, 64, 96, 128, 256), (1, 16, 128), (1, 4, 32, 128)
    ):
        if page_size * pages <= 32768:
            yield batch, h_q, query_len, head_dim, h_kv, page_size, pages


@pytest.mark.parametrize("dtype", DTYPES)
def test_python_launcher_plans_as_the_op(dtype: str) -> None:
    mismatches = []
    for batch, h_q, query_len, head_dim, h_kv, page_size, pages in shapes():
        op = ext.gpu_launch_plan(batch, h_q, query_len, head_dim, h_kv, page_size, pages, dtype)
        py = gpu_kernels.plan_launch((batch, h_q, query_len, head_dim), getattr(mx, dtype), h_kv, page_size, pages)
        fields = ["schedule", "blocks", "shared_bytes", "splits"]
        fields += ["rows", "mma", "mma_stages", "swizzled_rows"] if py.schedule in ("decode", "split") else ["key_tile"]
        fields += ["scratch_words", "out_begin_words"] if py.schedule == "split" else []
        got = {"schedule": SCHEDULES[op["schedule"]], **{f: op[f] for f in fields[1:]}}
        want = {f: getattr(py, f) for f in fields}
        if got != want:
            mismatches.append(((batch, h_q, query_len, head_dim, h_kv, page_size, pages), got, want))
    assert not mismatches, f"{len(mismatches)} shapes differ, first: {mismatches[0]}"


def test_the_goal_shapes_take_the_schedules_the_notes_report() -> None:
    # ext/kernels/NOTES.md: one pass at 64 x 4096, 3 ring stages; 16 splits at 1 x 16384, two splits
    # at 16 x 16384 and at 16 x 4096, one pass at 16 x 1024: the fastest of the measured sweeps.
    plan = ext.gpu_launch_plan(64, 32, 1, 128, 8, 128, 32, "bfloat16")
    assert (plan["schedule"], plan["mma"], plan["mma_stages"]) == ("paged_decode", True, 3)
    assert ext.gpu_launch_plan(64, 32, 1, 128, 8, 128, 128, "bfloat16")["splits"] == 1
    assert ext.gpu_launch_plan(1, 32, 1, 128, 8, 128, 128, "bfloat16")["splits"] == 16
    assert ext.gpu_launch_plan(16, 32, 1, 128, 8, 128, 128, "bfloat16")["splits"] == 2
    assert ext.gpu_launch_plan(16, 32, 1, 128, 8, 128, 32, "bfloat16")["splits"] == 2
    assert ext.gpu_launch_plan(16, 32, 1, 128, 8, 128, 8, "bfloat16")["splits"] == 1
    # Swizzled ring rows wherever multiprocessors hold two blocks or more (B 16 split in two, B 64), padded
    # where they hold one (B 1 in 16 splits, B 16 in one pass).
    swizzled = {(b, pages): ext.gpu_launch_plan(b, 32, 1, 128, 8, 128, pages, "bfloat16")["swizzled_rows"]
                for b, pages in ((1, 128), (16, 8), (16, 32), (16, 128), (64, 8), (64, 32), (64, 128))}
    assert swizzled == {(1, 128): False, (16, 8): False, (16, 32): True, (16, 128): True,
                        (64, 8): True, (64, 32): True, (64, 128): True}


def test_split_scratch_holds_partials_counters_and_an_aligned_output() -> None:
    # B 1, H_q 32, L 1, D 128, bfloat16, 16 splits over 8 blocks: 32 rows x 16 x 132 words of partials
    # (D + 2 rounded up to 4), 8 counters, the fill word, then 32 x 128 bfloat16 = 2048 words from a
    # multiple of 4.
    plan = ext.gpu_launch_plan(1, 32, 1, 128, 8, 128, 128, "bfloat16")
    partial = 32 * 16 * 132
    assert plan["out_begin_words"] == -(-(partial + 8 + 1) // 4) * 4
    assert plan["scratch_words"] == plan["out_begin_words"] + 2048
    assert ext.gpu_launch_plan(64, 32, 1, 128, 8, 128, 32, "bfloat16")["scratch_words"] == 0


def test_bad_plan_arguments_are_value_errors() -> None:
    with pytest.raises(ValueError, match="dtype = int8"):
        ext.gpu_launch_plan(1, 32, 1, 128, 8, 128, 8, "int8")
    with pytest.raises(ValueError, match="multiple of H_kv"):
        ext.gpu_launch_plan(1, 30, 1, 128, 8, 128, 8, "float32")
    with pytest.raises(ValueError, match="head dim D = 512"):
        ext.gpu_launch_plan(1, 32, 1, 512, 8, 128, 8, "float32")


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_output_is_read_from_the_scratch_out_region(dtype: str) -> None:
    # Lay out a scratch as the kernel would (poisoned partials and counters, the output from out_begin) and
    # read it back through the launcher's view, on any device.
    shape = (3, 12, 1, 96)
    plan = gpu_kernels.plan_launch(shape, getattr(mx, dtype), 4, 16, 64, schedule="split", num_splits=5)
    want = mx.random.normal(shape).astype(getattr(mx, dtype))
    words = want.reshape(-1).view(mx.uint8)
    head = mx.full((plan.out_begin_words * 4,), 0xFF, dtype=mx.uint8)
    tail = mx.zeros((plan.scratch_words * 4 - head.size - words.size,), dtype=mx.uint8)
    scratch = mx.concatenate([head, words, tail]).view(mx.float32)
    assert scratch.size == plan.scratch_words
    got = gpu_kernels.split_output(scratch, plan, shape, getattr(mx, dtype))
    assert got.shape == shape and got.dtype == getattr(mx, dtype)
    assert mx.array_equal(got, want).item()


def test_bulk_copies_are_planned_only_for_the_tensor_core_walk() -> None:
    shape = (2, 8, 1, 128)
    bf16 = gpu_kernels.plan_launch(shape, mx.bfloat16, 2, 16, 8, mma_bulk=True)
    f32 = gpu_kernels.plan_launch(shape, mx.float32, 2, 16, 8, mma_bulk=True)
    assert (bf16.mma, bf16.mma_bulk) == (True, True)
    assert (f32.mma, f32.mma_bulk) == (False, False)
    assert not gpu_kernels.plan_launch(shape, mx.bfloat16, 2, 16, 8).mma_bulk
