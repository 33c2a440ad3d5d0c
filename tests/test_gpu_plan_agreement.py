"""The one GPU launch planner (ext/src/common/gpu_plan.cpp), asked through the binding, on any machine.

The op takes its automatic plan; the Python launcher (pagecheck/gpu/kernels.py) runs the same kernels with
pins (schedule, splits, tensor_cores, mma_stages, bulk) that the sweeps and checks fix. Expected plans are
literal numbers worked out from the kernels' layouts, so a change of a rule shows here.
"""

from __future__ import annotations

import itertools
from typing import Any

import mlx.core as mx
import pytest

from pagecheck import ext
from pagecheck.gpu import kernels as gpu_kernels

HEADS = ((32, 8), (8, 8), (12, 4), (6, 2))
DTYPES = ("bfloat16", "float16", "float32")
# The benchmark's decode heads: H_q 32, H_kv 8, D 128, bfloat16, pages of 128.
GOAL = dict(num_q_heads=32, query_len=1, head_dim=128, num_kv_heads=8, page_size=128, dtype="bfloat16")


def plan(batch: int, pages: int, **options: Any) -> dict[str, Any]:
    """The plan for B `batch` over `pages` pages a request: GOAL's shape but for the options that name its
    fields, the rest are pins."""
    shape = {**GOAL, **{key: value for key, value in options.items() if key in GOAL}}
    pins = {key: value for key, value in options.items() if key not in GOAL}
    return ext.gpu_launch_plan(batch, shape["num_q_heads"], shape["query_len"], shape["head_dim"],
                               shape["num_kv_heads"], shape["page_size"], pages, shape["dtype"], **pins)


# Shared memory of a tensor-core decode block, D 128 bfloat16, 3 stages: 4 warps x 3 stages x (K, V) x 16 rows of
# 128 elements x 2 bytes swizzled; rows padded to 136 elements where bulk copies fill the ring or the grid holds
# at most one block per multiprocessor. (The merge region, 4 warps x 16 rows x (128 + 2) floats, is smaller.)
SWIZZLED_RING = 4 * 3 * 2 * 16 * 128 * 2
PADDED_RING = 4 * 3 * 2 * 16 * 136 * 2

PINNED: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # B 16 x 16384 splits in two automatically (256 blocks, rows swizzled); pinned to one pass its 128 blocks fit
    # the 132 multiprocessors once, so its rows are padded.
    "one pass where the op splits": (
        dict(batch=16, pages=128, schedule="paged_decode"),
        dict(schedule="paged_decode", mma=True, rows=16, blocks=128, splits=1, shared_bytes=PADDED_RING,
             swizzled_rows=False, bulk=False, scratch_words=0)),
    # B 64 x 4096, a ring of 4 stages: 512 blocks, one pass, swizzled rows.
    "four ring stages": (
        dict(batch=64, pages=32, mma_stages=4),
        dict(schedule="paged_decode", mma=True, mma_stages=4, blocks=512, splits=1,
             shared_bytes=4 * 4 * 2 * 16 * 128 * 2, swizzled_rows=True)),
    # The CUDA-core walk on bfloat16 at B 1 x 16384: rows of 4 (G = 4), 8 blocks; a ring of 4 warps x 3 stages x
    # (K, V) x 8 tokens x 16 vectors of 8 elements x 2 bytes; 16 splits fill 128 of the multiprocessors (the
    # split rule's cost: 2150 positions against 2200 for 15 and 2984 for 17).
    "CUDA cores on bfloat16": (
        dict(batch=1, pages=128, tensor_cores=False),
        dict(schedule="paged_decode_split", mma=False, rows=4, blocks=8, splits=16,
             shared_bytes=4 * 3 * 2 * 8 * 16 * 8 * 2, swizzled_rows=False, scratch_words=69644,
             out_begin_words=67596)),
    # Bulk copies on B 16 x 16384: the same two splits, rows padded (the bulk copies need it).
    "bulk copies": (
        dict(batch=16, pages=128, bulk=True),
        dict(schedule="paged_decode_split", mma=True, bulk=True, blocks=128, splits=2, shared_bytes=PADDED_RING,
             swizzled_rows=False)),
    # float32 has no tensor-core walk: the bulk request is dropped. Rows of 8 (G = 4 x L = 2 rounded up to 8),
    # a ring of 4 x 3 x 2 x 4 tokens x 32 vectors of 4 floats x 4 bytes.
    "bulk copies on float32": (
        dict(batch=2, pages=8, dtype="float32", query_len=2, bulk=True),
        dict(mma=False, bulk=False, rows=8, blocks=16, shared_bytes=4 * 3 * 2 * 4 * 32 * 4 * 4)),
    # 5 splits of B 3, H_q 12, H_kv 4, D 96 (padded rows of 104): partials 36 rows x 5 x 100 words, 12 counters,
    # the fill word, the output from 18016 (a multiple of 4): 36 x 96 bfloat16 = 1728 words.
    "five splits": (
        dict(batch=3, pages=64, num_q_heads=12, num_kv_heads=4, head_dim=96, page_size=16,
             schedule="paged_decode_split", splits=5),
        dict(schedule="paged_decode_split", mma=True, rows=16, blocks=12, splits=5,
             shared_bytes=4 * 3 * 2 * 16 * 104 * 2, scratch_words=18016 + 1728, out_begin_words=18016)),
    # A decode schedule for L = 12 (the harness's case): G 2 x L 12 = 24 rows in two blocks of 16 per kv head.
    "decode for twelve queries": (
        dict(batch=1, pages=13, num_q_heads=4, num_kv_heads=2, query_len=12, page_size=16,
             schedule="paged_decode", tensor_cores=True),
        dict(schedule="paged_decode", mma=True, rows=16, blocks=4, splits=1, shared_bytes=PADDED_RING)),
    # Prefill of 64 queries: G 4 x 64 = 256 rows, 4 row tiles of 64 per kv head. The tensor-core prefill stages
    # K and V twice in 64-key tiles of padded rows; the CUDA-core prefill holds 96 rows of D + 1, 32 of D, and
    # a 64 x 33 score tile, in floats.
    "prefill on tensor cores": (
        dict(batch=1, pages=8, query_len=64),
        dict(schedule="paged_prefill_mma", blocks=32, key_tile=64, shared_bytes=4 * 64 * 136 * 2, splits=1)),
    "prefill on CUDA cores": (
        dict(batch=1, pages=8, query_len=64, schedule="paged_prefill"),
        dict(schedule="paged_prefill", blocks=32, key_tile=0, shared_bytes=4 * (96 * 129 + 32 * 128 + 64 * 33))),
    "prefill with tensor cores off": (
        dict(batch=1, pages=8, query_len=64, tensor_cores=False),
        dict(schedule="paged_prefill", blocks=32, shared_bytes=74368)),
    "tensor-core prefill on pages of 16": (
        dict(batch=1, pages=8, query_len=64, page_size=16, schedule="paged_prefill_mma"),
        dict(schedule="paged_prefill_mma", key_tile=64, shared_bytes=4 * 64 * 136 * 2)),
    # On a device with warpgroup MMA (warpgroup_mma=True): B 1 x L 512, G 4 = 2048 rows per kv head. Blocks of
    # 3 warpgroups (192 rows) would number 8 x 11 = 88, short of two per multiprocessor (264), so blocks of 2
    # (128 rows, 16 per kv head) with key tiles of 128: a ring of 3 stages of K and V, 128 keys of 128 bfloat16
    # each, the 2 warpgroups' 64 query rows, a full and a free barrier of 8 bytes per stage, and 1024 bytes to
    # align the ring. Pages of 128 hold whole key tiles, so a third warpgroup of 56 registers copies them
    # (threads 384); the producer adds no shared memory.
    "warpgroup prefill in blocks of two": (
        dict(batch=1, pages=32, query_len=512, warpgroup_mma=True),
        dict(schedule="paged_prefill_wgmma", warpgroups=2, key_tile=128, producer_registers=56, threads=384,
             blocks=128, mma_stages=3, shared_bytes=2 * 3 * 128 * 128 * 2 + 2 * 64 * 128 * 2 + 2 * 3 * 8 + 1024,
             scratch_words=0)),
    "warpgroup prefill in blocks of two, the producer pinned off": (
        dict(batch=1, pages=32, query_len=512, warpgroup_mma=True, producer_registers=0),
        dict(schedule="paged_prefill_wgmma", warpgroups=2, producer_registers=0, threads=256, blocks=128)),
    # Pages of 64: a tile of 128 keys spans two pages, so the consumers copy their own (no producer); blocks of 2
    # (88 blocks of 3 would be too few, as above).
    "warpgroup prefill in blocks of two where tiles span pages": (
        dict(batch=1, pages=64, query_len=512, page_size=64, warpgroup_mma=True),
        dict(schedule="paged_prefill_wgmma", warpgroups=2, key_tile=128, producer_registers=0, threads=256,
             blocks=128)),
    # B 4 x L 2048 over pages of 128: tiles of 128 keys lie inside pages, so blocks of 2 and a producer as well.
    "warpgroup prefill in blocks of two where pages hold whole tiles": (
        dict(batch=4, pages=64, query_len=2048, warpgroup_mma=True),
        dict(schedule="paged_prefill_wgmma", warpgroups=2, key_tile=128, producer_registers=56, threads=384,
             blocks=2048, mma_stages=3)),
    # B 4 x L 2048 over pages of 16: 8192 rows per kv head, 4 x 8 x 43 = 1376 blocks of 192 rows, key tiles of
    # 64.
    "warpgroup prefill in blocks of three": (
        dict(batch=4, pages=512, query_len=2048, page_size=16, warpgroup_mma=True),
        dict(schedule="paged_prefill_wgmma", warpgroups=3, key_tile=64, producer_registers=0, threads=384,
             blocks=1376, mma_stages=3,
             shared_bytes=2 * 3 * 64 * 128 * 2 + 3 * 64 * 128 * 2 + 2 * 3 * 8 + 1024)),
    "warpgroup prefill pinned to one warpgroup, float16, D 64": (
        dict(batch=1, pages=32, query_len=512, warpgroup_mma=True, warpgroups=1, dtype="float16", head_dim=64),
        dict(schedule="paged_prefill_wgmma", warpgroups=1, key_tile=128, threads=128, blocks=256,
             shared_bytes=2 * 3 * 128 * 64 * 2 + 64 * 64 * 2 + 2 * 3 * 8 + 1024)),
    "no warpgroup prefill for D 96": (
        dict(batch=1, pages=32, query_len=512, warpgroup_mma=True, head_dim=96),
        dict(schedule="paged_prefill_mma", warpgroups=0, threads=128)),
    "no warpgroup prefill for float32": (
        dict(batch=1, pages=32, query_len=512, warpgroup_mma=True, dtype="float32"),
        dict(schedule="paged_prefill", warpgroups=0, threads=128)),
    "decode is the same with warpgroup MMA": (
        dict(batch=64, pages=32, warpgroup_mma=True),
        dict(schedule="paged_decode", mma=True, rows=16, blocks=512, threads=128, warpgroups=0)),
    # A prefill schedule for one query: B 2 x H_kv 2, one row tile each.
    "prefill for one query": (
        dict(batch=2, pages=8, num_q_heads=8, num_kv_heads=2, page_size=8, dtype="float16", schedule="paged_prefill"),
        dict(schedule="paged_prefill", blocks=4, scratch_words=0)),
}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_a_pinned_plan_takes_the_stated_geometry(name: str) -> None:
    pins, want = PINNED[name]
    got = plan(**dict(pins))
    assert {key: got[key] for key in want} == want, got


def shapes() -> Any:
    for batch, (h_q, h_kv), query_len, head_dim, page_size, pages, dtype in itertools.product(
        (1, 3, 16, 64), HEADS, (1, 3, 8, 9), (5, 64, 96, 128, 256), (16, 128), (1, 4, 32, 128), DTYPES
    ):
        yield batch, h_q, query_len, head_dim, h_kv, page_size, pages, dtype


def test_pinning_the_automatic_choices_gives_the_automatic_plan() -> None:
    # The pinned path and the automatic one are the same planner: fixing every choice at the value the plan
    # took changes nothing (the split count, the swizzle and the residency follow the same rules).
    differ = []
    for shape in shapes():
        auto = ext.gpu_launch_plan(*shape)
        pins: dict[str, Any] = {"schedule": auto["schedule"]}
        if auto["schedule"].startswith("paged_decode"):
            pins.update(splits=auto["splits"], tensor_cores=auto["mma"])
            if auto["mma"]:
                pins["mma_stages"] = auto["mma_stages"]
        pinned = ext.gpu_launch_plan(*shape, **pins)
        if pinned != auto:
            differ.append((shape, pins, pinned, auto))
    assert not differ, f"{len(differ)} shapes differ, first: {differ[0]}"


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
    split = gpu_kernels.launch_plan(shape, getattr(mx, dtype), 4, 16, 64, schedule="paged_decode_split", splits=5)
    want = mx.random.normal(shape).astype(getattr(mx, dtype))
    words = want.reshape(-1).view(mx.uint8)
    head = mx.full((split["out_begin_words"] * 4,), 0xFF, dtype=mx.uint8)
    tail = mx.zeros((split["scratch_words"] * 4 - head.size - words.size,), dtype=mx.uint8)
    scratch = mx.concatenate([head, words, tail]).view(mx.float32)
    assert scratch.size == split["scratch_words"]
    got = gpu_kernels.split_output(scratch, split, shape, getattr(mx, dtype))
    assert got.shape == shape and got.dtype == getattr(mx, dtype)
    assert mx.array_equal(got, want).item()


def test_bulk_copies_are_planned_only_for_the_tensor_core_walk() -> None:
    shape = (2, 8, 1, 128)
    bf16 = gpu_kernels.launch_plan(shape, mx.bfloat16, 2, 16, 8, bulk=True)
    f32 = gpu_kernels.launch_plan(shape, mx.float32, 2, 16, 8, bulk=True)
    prefill = gpu_kernels.launch_plan((2, 8, 12, 128), mx.bfloat16, 2, 16, 8, bulk=True)
    assert (bf16["mma"], bf16["bulk"]) == (True, True)
    assert (f32["mma"], f32["bulk"]) == (False, False)
    tensor_prefill = "paged_prefill_wgmma" if ext.gpu_warpgroup_mma() else "paged_prefill_mma"
    assert (prefill["schedule"], prefill["bulk"]) == (tensor_prefill, False)
    assert not gpu_kernels.launch_plan(shape, mx.bfloat16, 2, 16, 8)["bulk"]


# (pins, shape changes from GOAL, the message's field and value): every pin out of range or at odds with the
# shape, the dtype or another pin.
BAD_PINS = [
    (dict(splits=0), {}, "splits = 0 must be in 1..64"),
    (dict(splits=65), {}, "splits = 65 must be in 1..64"),
    (dict(mma_stages=1), {}, "mma_stages = 1 must be at least 2"),
    (dict(schedule="paged_fast"), {}, "schedule = paged_fast is not one of paged_decode, paged_decode_split"),
    (dict(schedule="paged_decode", splits=5), {}, "splits = 5 needs schedule = paged_decode_split"),
    (dict(splits=2), dict(query_len=12), "splits = 2 pins the decode walk, and this plan runs paged_prefill_mma"),
    (dict(schedule="paged_prefill", mma_stages=3), {}, "mma_stages = 3 pins the decode walk"),
    (dict(tensor_cores=False, mma_stages=4), {}, "mma_stages = 4 sizes the tensor-core walk's ring"),
    (dict(mma_stages=3), dict(dtype="float32"), "mma_stages = 3 sizes the tensor-core walk's ring"),
    # 4 warps x 9 stages x (K, V) x 16 padded rows of 136 bfloat16, above 228 KB less the 1 KB a block keeps.
    (dict(mma_stages=9), {}, "mma_stages = 9 needs 313344 bytes of shared memory per block, above the 232448"),
    (dict(tensor_cores=True), dict(dtype="float32"), "tensor_cores = true needs the tensor-core kernels"),
    (dict(tensor_cores=True), dict(head_dim=72), "tensor_cores = true needs .*; got bfloat16 and D = 72"),
    (dict(schedule="paged_prefill_mma"), dict(dtype="float16", head_dim=256), "schedule = paged_prefill_mma needs"),
    (dict(schedule="paged_prefill", tensor_cores=True), {}, "tensor_cores = true contradicts schedule = paged_prefill"),
    (dict(schedule="paged_prefill_mma", tensor_cores=False), {},
     "tensor_cores = false contradicts schedule = paged_prefill_mma"),
    (dict(warpgroups=0), dict(query_len=12), "warpgroups = 0 must be in 1..3"),
    (dict(warpgroups=4, warpgroup_mma=True), dict(query_len=12), "warpgroups = 4 must be in 1..3"),
    (dict(warpgroups=2, warpgroup_mma=True), {},
     "warpgroups = 2 pins the warpgroup prefill, and this plan runs a decode walk"),
    (dict(warpgroups=2), dict(query_len=12),
     "warpgroups = 2 pins the warpgroup prefill, and this plan runs paged_prefill_mma"),
    (dict(schedule="paged_prefill_wgmma"), dict(query_len=12),
     "schedule = paged_prefill_wgmma needs warpgroup MMA .*, and this device has no warpgroup MMA"),
    (dict(schedule="paged_prefill_wgmma", warpgroup_mma=True), dict(head_dim=96),
     "schedule = paged_prefill_wgmma needs .*; got bfloat16 and D = 96"),
    (dict(schedule="paged_prefill_wgmma", warpgroup_mma=True, tensor_cores=False), {},
     "tensor_cores = false contradicts schedule = paged_prefill_wgmma"),
]


@pytest.mark.parametrize("pins, shape, message", BAD_PINS, ids=[message for _, _, message in BAD_PINS])
def test_a_bad_pin_is_a_value_error_naming_it(pins: dict[str, Any], shape: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=f"^pagecheck: {message}"):
        plan(1, 8, **shape, **pins)


def test_the_warpgroup_prefill_takes_what_the_binding_says() -> None:
    # gpu_takes_warpgroup_mma is the rule the harness and the launcher tests skip by: on a device with warpgroup
    # MMA the automatic prefill is the warpgroup kernel exactly where it says so.
    taken = []
    for dtype, head_dim in itertools.product(DTYPES, (16, 48, 64, 96, 128, 256)):
        auto = plan(1, 8, query_len=12, dtype=dtype, head_dim=head_dim, warpgroup_mma=True)
        takes = ext.gpu_takes_warpgroup_mma(head_dim, dtype)
        assert (auto["schedule"] == "paged_prefill_wgmma") == takes, (dtype, head_dim, auto["schedule"])
        taken += [(dtype, head_dim)] if takes else []
    assert taken == [("bfloat16", 64), ("bfloat16", 128), ("float16", 64), ("float16", 128)]


def test_pinning_the_warpgroup_choices_gives_the_automatic_plan() -> None:
    # As above for the warpgroup prefill: its schedule and block height pinned at the automatic values.
    for batch, query_len, dtype, head_dim in itertools.product((1, 4, 16), (9, 512, 2048), ("bfloat16", "float16"),
                                                               (64, 128)):
        auto = plan(batch, 64, query_len=query_len, dtype=dtype, head_dim=head_dim, warpgroup_mma=True)
        assert auto["schedule"] == "paged_prefill_wgmma"
        pinned = plan(batch, 64, query_len=query_len, dtype=dtype, head_dim=head_dim, warpgroup_mma=True,
                      schedule=auto["schedule"], warpgroups=auto["warpgroups"])
        assert pinned == auto


def test_the_constants_are_the_limits_the_planner_holds() -> None:
    constants = ext.gpu_plan_constants()
    assert plan(64, 32)["mma_stages"] == constants["decode_mma_stages"]
    assert plan(64, 32)["rows"] == constants["decode_mma_rows"]
    assert plan(1, 128, splits=constants["max_splits"])["splits"] == constants["max_splits"]
    with pytest.raises(ValueError, match="splits"):
        plan(1, 128, splits=constants["max_splits"] + 1)
    assert plan(1, 128, mma_stages=constants["min_mma_stages"])["mma_stages"] == constants["min_mma_stages"]
    with pytest.raises(ValueError, match="mma_stages"):
        plan(1, 128, mma_stages=constants["min_mma_stages"] - 1)
    assert plan(1, 8, query_len=constants["decode_max_query_len"])["schedule"].startswith("paged_decode")
    assert plan(1, 8, query_len=constants["decode_max_query_len"] + 1)["schedule"] == "paged_prefill_mma"
    assert plan(1, 8, head_dim=constants["mma_max_head_dim"])["mma"]
    assert not plan(1, 8, head_dim=constants["mma_max_head_dim"] + 16)["mma"]
    plan(1, 8, head_dim=constants["max_head_dim"])
    with pytest.raises(ValueError, match="head dim"):
        plan(1, 8, head_dim=constants["max_head_dim"] + 1)
    # B 1's 8 blocks would take more splits of a short context than its positions allow: each split covers
    # at least min_split_positions of the table's capacity.
    assert plan(1, 1, page_size=3 * constants["min_split_positions"])["splits"] == 3
    assert plan(1, 1, page_size=3 * constants["min_split_positions"] - 1)["splits"] == 2
    assert constants["threads_per_block"] == 128  # 4 warps: the walks' and prefills' block (ext/kernels)


def test_the_walk_figures_are_the_kernels_layouts() -> None:
    # Tensor-core ring at D 128 bfloat16, 3 stages, swizzled and padded; the CUDA-core walk's ring at rows of 4
    # (bfloat16: 8 tokens a tile) and 8 (float32: 4 tokens a tile of 32 vectors of 4).
    def shared(dtype: str, tensor_cores: bool, rows: int, swizzled: bool = True) -> int:
        return ext.gpu_decode_shared_bytes(128, rows, dtype, tensor_cores=tensor_cores, mma_stages=3,
                                           swizzled_rows=swizzled)

    assert shared("bfloat16", True, 16) == SWIZZLED_RING
    assert shared("bfloat16", True, 16, swizzled=False) == PADDED_RING
    assert shared("bfloat16", False, 4) == 4 * 3 * 2 * 8 * 16 * 8 * 2
    assert shared("float32", False, 8) == 4 * 3 * 2 * 4 * 32 * 4 * 4
    # What the plan asks for is that figure.
    assert plan(64, 32)["shared_bytes"] == SWIZZLED_RING
    assert (ext.gpu_walk_registers(True, 16), ext.gpu_walk_registers(False, 4), ext.gpu_walk_registers(False, 8)) == (
        232, 128, 255)
    with pytest.raises(ValueError, match="rows"):
        ext.gpu_walk_registers(False, 0)
    assert ext.gpu_takes_tensor_cores(128, "bfloat16") and ext.gpu_takes_tensor_cores(48, "float16")
    assert not ext.gpu_takes_tensor_cores(128, "float32") and not ext.gpu_takes_tensor_cores(72, "bfloat16")
