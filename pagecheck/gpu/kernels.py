"""Launch the paged-attention CUDA kernels of ext/kernels from Python.

The C++ extension is the production route (its eval_gpu picks a schedule by
query length). This module drives the very same kernel files through
mx.fast.cuda_kernel one schedule at a time, so a check or a benchmark can pin
a schedule and a split count that the automatic choice would not take. Its
launch geometry (threads, shared-memory sizes, split rule) mirrors
ext/src's GPU dispatch; both follow the layouts documented in the kernels.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

def _kernel_dir() -> Path:
    """ext/kernels, found without loading the extension module."""
    spec = importlib.util.find_spec("pagecheck.ext")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("pagecheck.ext is not importable; is pagecheck installed?")
    return Path(next(iter(spec.submodule_search_locations))) / "kernels"


KERNEL_DIR = _kernel_dir()

# Queries per row up to this count take the decode schedules.
DECODE_MAX_QUERIES = 8
# Largest head dim the GPU kernels take (register and shared-memory budgets).
MAX_HEAD_DIM = 256
# Tensor-core prefill: 16-bit dtypes, head dims that are multiples of 16 up to this.
MMA_MAX_HEAD_DIM = 128
THREADS_PER_BLOCK = 128
DECODE_MAX_ROWS = 8
DECODE_STAGES = 3
DECODE_STEPS_PER_TILE = 4
PREFILL_ROW_TILE = 64
# Where the kernels find pages and contexts (TABLE in paged_common.cuh): this
# launcher always passes a block table and context lengths.
TABLE_PAGED = 0
# Split rule (see choose_splits): an H200 has 132 multiprocessors; a split
# covers at least MIN_SPLIT_POSITIONS positions of the table's capacity; a
# block's fixed cost (prologue, epilogue) and the merge of the splits are
# counted as BLOCK_COST_POSITIONS and MERGE_COST_POSITIONS (+ MERGE_COST_PER_SPLIT
# per split: the last block of a column reads every split's partial) positions
# of work, and a multiprocessor running one block at a time walks
# LONE_BLOCK_SLOWDOWN times slower. Fitted on the H200 (ext/src/common/gpu_plan.cpp says how).
SM_COUNT = 132
MIN_SPLIT_POSITIONS = 256
MAX_SPLITS = 64
BLOCK_COST_POSITIONS = 128
MERGE_COST_POSITIONS = 256
MERGE_COST_PER_SPLIT = 32
LONE_BLOCK_SLOWDOWN = 1.2
SM_SHARED_BYTES = 228 * 1024
SM_REGISTERS = 65536

DECODE_MMA_ROWS = 16
DECODE_MMA_STAGES = 3

SCHEDULES = ("decode", "split", "prefill", "prefill_mma")
# The softmax scale is no input: it is the template argument SCALE_BITS.
PAGED_INPUTS = ("query", "key_pages", "value_pages", "block_table", "context_lens")
DECODE_HEADERS = (
    "paged_common.cuh", "paged_mma.cuh", "paged_bulk_copy.cuh", "paged_decode_merge.cuh", "paged_decode_walk.cuh",
    "paged_decode_mma_walk.cuh", "paged_decode_walker.cuh", "paged_decode_split_scratch.cuh",
)


@dataclass(frozen=True)
class KernelSource:
    stem: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    headers: tuple[str, ...]
    directory: Path = KERNEL_DIR  # where the body lives (headers are always ext/kernels')

    def read(self) -> tuple[str, str]:
        """(header, body) exactly as fast::cuda_kernel receives them."""
        header = "\n".join((KERNEL_DIR / name).read_text() for name in self.headers)
        return header, (self.directory / f"{self.stem}.cu").read_text()


KERNELS: dict[str, KernelSource] = {
    "paged_decode": KernelSource("paged_decode", PAGED_INPUTS, ("out",), DECODE_HEADERS),
    "paged_decode_split": KernelSource("paged_decode_split", PAGED_INPUTS, ("scratch",), DECODE_HEADERS),
    "paged_prefill": KernelSource("paged_prefill", PAGED_INPUTS, ("out",), ("paged_common.cuh",)),
    "paged_prefill_mma": KernelSource(
        "paged_prefill_mma", PAGED_INPUTS, ("out",), ("paged_common.cuh", "paged_mma.cuh")
    ),
}

# Not an attention kernel: the streaming ceiling probe of pagecheck/gpu_stream_probe.py, which reads
# the pages as the tensor-core decode walk does with the walk's own headers.
STREAM_PROBE = KernelSource(
    "paged_stream", ("key_pages", "value_pages", "block_table", "context_lens"), ("checksum",),
    ("paged_common.cuh", "paged_mma.cuh", "paged_bulk_copy.cuh", "paged_decode_merge.cuh"),
    Path(__file__).resolve().parent / "probes",
)


def kernel_name(source: KernelSource) -> str:
    """A name that changes with the source: MLX caches compiled kernels by name on disk."""
    header, body = source.read()
    digest = hashlib.sha1((header + body).encode()).hexdigest()[:12]
    return f"pagecheck_{source.stem}_{digest}"


@cache
def compiled(stem: str, shared_bytes: int) -> Any:
    source = KERNELS[stem]
    header, body = source.read()
    return mx.fast.cuda_kernel(
        name=kernel_name(source),
        input_names=list(source.inputs),
        output_names=list(source.outputs),
        source=body,
        header=header,
        ensure_row_contiguous=True,
        shared_memory=shared_bytes,
    )


def scale_bits(scale: float) -> int:
    """The float32 bit pattern of `scale` as a signed int (template argument SCALE_BITS)."""
    return int(np.array(scale, dtype=np.float32).view(np.int32))


def next_pow2(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


# ---- Launch geometry (the kernels' layouts, see each kernel's comment) -------


def takes_mma(dtype: mx.Dtype, head_dim: int) -> bool:
    """Tensor-core kernels: 16-bit dtypes, head dims that are multiples of 16 up to MMA_MAX_HEAD_DIM."""
    return dtype in (mx.bfloat16, mx.float16) and head_dim % 16 == 0 and head_dim <= MMA_MAX_HEAD_DIM


def decode_rows(rows: int, mma: bool) -> int:
    """Query rows per decode block: 16 for the tensor-core walk, else all of a
    kv head's rows up to DECODE_MAX_ROWS (a power of two)."""
    return DECODE_MMA_ROWS if mma else min(next_pow2(rows), DECODE_MAX_ROWS)


def mma_row_stride(head_dim: int, swizzled: bool = True) -> int:
    """SharedRows<HEAD_DIM, SWIZZLE>::STRIDE (paged_mma.cuh): K/V rows in a tensor-core ring are unpadded
    and swizzled when head_dim is a multiple of 64, else padded by 8 elements (always with bulk copies)."""
    return head_dim if swizzled and head_dim % 64 == 0 else head_dim + 8


def decode_shared_bytes(itemsize: int, head_dim: int, rows: int, mma: bool, mma_stages: int = DECODE_MMA_STAGES,
                        swizzled_rows: bool = True) -> int:
    """DecodeWalker<...>::Layout::SHARED_BYTES: the staging ring or the merge region."""
    if mma:
        ring = 4 * mma_stages * 2 * 16 * mma_row_stride(head_dim, swizzled_rows) * itemsize
        return max(ring, 4 * rows * (head_dim + 2) * 4)
    vec = 16 // itemsize
    num_vecs = -(-head_dim // vec)
    vecs_per_lane = -(-num_vecs // 32)
    lanes_per_token = next_pow2(-(-num_vecs // vecs_per_lane))
    tile_tokens = (32 // lanes_per_token) * DECODE_STEPS_PER_TILE
    ring = 4 * DECODE_STAGES * 2 * tile_tokens * num_vecs * vec * itemsize
    merge = 4 * rows * (lanes_per_token * vecs_per_lane * vec + 2) * 4
    return max(ring, merge)


def prefill_shared_bytes(head_dim: int) -> int:
    stride = head_dim + 1 if head_dim % 2 == 0 else head_dim
    return 4 * (96 * stride + 32 * head_dim + 64 * 33)


def prefill_key_tile(page_size: int) -> int:
    """Tensor-core key tile: the largest of 64, 32, 16 that a page fills."""
    return 64 if page_size >= 64 else 32 if page_size >= 32 else 16


def prefill_mma_shared_bytes(itemsize: int, head_dim: int, key_tile: int) -> int:
    """The tensor-core prefill's two K and two V stages, rows padded (paged_prefill_mma.cu)."""
    return 4 * key_tile * mma_row_stride(head_dim, swizzled=False) * itemsize


def walk_registers(mma: bool, rows: int) -> int:
    """Registers per thread of a decode walk at most, as ptxas reports them (gpu_nvcc_check, which a test
    holds to these figures): the tensor-core walk's 222-225 rounded up to the allocation unit of 8 (NVRTC
    on the H200 gave 217), the CUDA-core walk's by its rows."""
    if mma:
        return 232
    return 128 if rows <= 4 else 255


def resident_blocks(shared_bytes: int, registers: int) -> int:
    """Decode blocks one multiprocessor holds at once (shared memory and registers)."""
    by_shared = SM_SHARED_BYTES // (shared_bytes + 1024)
    by_registers = SM_REGISTERS // (registers * THREADS_PER_BLOCK)
    return max(1, min(by_shared, by_registers))


def choose_splits(blocks: int, capacity: int, resident: int) -> int:
    """Splits of each (request, kv head, rows) block's context.

    The blocks spread over SM_COUNT multiprocessors, so the busiest one walks
    k = ceil(blocks x splits / SM_COUNT) of them: k x (positions per block +
    a block's fixed cost). Running two blocks or more at once it is bound by
    memory; running one at a time (k == 1, or one resident) it is bound by
    instruction latency, one warp per scheduler, and each position costs
    LONE_BLOCK_SLOWDOWN times more. Splitting adds the merge. The count
    minimising that total fills an under-occupied GPU, and doubles a grid of
    one block per multiprocessor only when its context is long enough to
    repay the merge.
    """
    most = max(1, min(MAX_SPLITS, capacity // MIN_SPLIT_POSITIONS))

    def cost(splits: int) -> float:
        per_sm = -(-(blocks * splits) // SM_COUNT)
        walk = per_sm * (capacity / splits + BLOCK_COST_POSITIONS)
        if min(per_sm, resident) == 1:
            walk *= LONE_BLOCK_SLOWDOWN
        merge = MERGE_COST_POSITIONS + MERGE_COST_PER_SPLIT * splits if splits > 1 else 0
        return walk + merge

    return min(range(1, most + 1), key=lambda splits: (cost(splits), splits))


@dataclass(frozen=True)
class LaunchPlan:
    """Which kernels run for one call, and their geometry."""

    schedule: str
    mma: bool
    rows: int  # query rows per decode block
    blocks: int  # decode or prefill blocks (grid x / THREADS_PER_BLOCK)
    splits: int
    shared_bytes: int
    key_tile: int  # tensor-core prefill only
    mma_stages: int = DECODE_MMA_STAGES  # ring stages of the tensor-core decode walk
    scratch_words: int = 0  # float32 words of the split scratch (split only)
    out_begin_words: int = 0  # where the output starts inside it
    mma_bulk: bool = False  # its ring filled by bulk copies (sm_90+) instead of cp.async
    swizzled_rows: bool = False  # its rows swizzled, not padded (more blocks than multiprocessors; gpu_plan.h)


def split_scratch(rows: int, splits: int, head_dim: int, blocks: int, itemsize: int) -> tuple[int, int]:
    """(out_begin, total_words) of the split decode's one float32 output (paged_decode_split_scratch.cuh):
    partial states [R, S, D + 2 rounded up to 4] (R = B * H_q * L) from 0, one counter per block column,
    the fill value, then the attention output from out_begin (16-byte aligned)."""
    fill_word = rows * splits * (-(-(head_dim + 2) // 4) * 4) + blocks
    out_begin = -(-(fill_word + 1) // 4) * 4
    return out_begin, out_begin + -(-(rows * head_dim * itemsize) // 4)


def plan_launch(
    query_shape: tuple[int, ...], dtype: mx.Dtype, num_kv_heads: int, page_size: int, table_width: int,
    schedule: str | None = None, num_splits: int | None = None, mma: bool | None = None,
    mma_stages: int = DECODE_MMA_STAGES, mma_bulk: bool = False,
) -> LaunchPlan:
    """The automatic plan, or one with the schedule, split count, decode walk or ring depth pinned."""
    if mma_stages < 2:
        raise ValueError(f"mma_stages={mma_stages} must be at least 2")
    batch, num_q_heads, num_queries, head_dim = query_shape
    group_rows = num_q_heads // num_kv_heads * num_queries
    if mma and not takes_mma(dtype, head_dim):
        raise ValueError(f"the tensor-core kernels take bfloat16/float16 with head_dim % 16 == 0 <= {MMA_MAX_HEAD_DIM}")
    mma = takes_mma(dtype, head_dim) if mma is None else mma
    # Bulk copies are a copy path of the tensor-core walk only: the plan says whether they run.
    mma_bulk = mma_bulk and mma
    rows = decode_rows(group_rows, mma)
    decode_blocks = batch * num_kv_heads * -(-group_rows // rows)
    # Residency by the padded ring, which is never smaller.
    resident = resident_blocks(decode_shared_bytes(dtype.size, head_dim, rows, mma, mma_stages, False),
                               walk_registers(mma, rows))
    if num_splits is None:
        num_splits = choose_splits(decode_blocks, table_width * page_size, resident)
    splits = num_splits
    swizzled_rows = mma and not mma_bulk and decode_blocks * splits > SM_COUNT
    shared_bytes = decode_shared_bytes(dtype.size, head_dim, rows, mma, mma_stages, swizzled_rows)
    if not 1 <= splits <= MAX_SPLITS:
        raise ValueError(f"num_splits={splits} must be in 1..{MAX_SPLITS} (the split kernel's merge holds that many)")
    if schedule is None:
        if num_queries <= DECODE_MAX_QUERIES:
            schedule = "split" if splits > 1 else "decode"
        else:
            schedule = "prefill_mma" if mma else "prefill"
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule={schedule!r} is not one of {SCHEDULES}")
    itemsize = dtype.size
    if schedule == "decode":
        return LaunchPlan(schedule, mma, rows, decode_blocks, 1, shared_bytes, 0, mma_stages, mma_bulk=mma_bulk,
                          swizzled_rows=swizzled_rows)
    if schedule == "split":
        out_begin, total_words = split_scratch(batch * num_q_heads * num_queries, splits, head_dim, decode_blocks,
                                               itemsize)
        return LaunchPlan(schedule, mma, rows, decode_blocks, splits, shared_bytes, 0, mma_stages, total_words,
                          out_begin, mma_bulk, swizzled_rows)
    prefill_blocks = batch * num_kv_heads * -(-group_rows // PREFILL_ROW_TILE)
    if schedule == "prefill_mma":
        if not takes_mma(dtype, head_dim):
            raise ValueError(f"prefill_mma takes bfloat16/float16 with head_dim % 16 == 0 <= {MMA_MAX_HEAD_DIM}")
        key_tile = prefill_key_tile(page_size)
        return LaunchPlan(schedule, True, 0, prefill_blocks, 1,
                          prefill_mma_shared_bytes(itemsize, head_dim, key_tile), key_tile)
    return LaunchPlan(schedule, False, 0, prefill_blocks, 1, prefill_shared_bytes(head_dim), 0)


# ---- Launch ---------------------------------------------------------------------


def split_output(scratch: mx.array, plan: LaunchPlan, shape: tuple[int, ...], dtype: mx.Dtype) -> mx.array:
    """The attention output inside the split kernel's scratch: a view of its out region, no copy."""
    return scratch[plan.out_begin_words:].view(dtype)[: math.prod(shape)].reshape(shape)


def paged_attention(
    query: mx.array,
    key_pages: mx.array,
    value_pages: mx.array,
    block_table: mx.array,
    context_lens: mx.array,
    page_size: int,
    scale: float | None = None,
    mask: str | None = None,
    *,
    schedule: str | None = None,
    num_splits: int | None = None,
    mma: bool | None = None,
    mma_stages: int = DECODE_MMA_STAGES,
    mma_bulk: bool = False,
    poison_output: bool = False,
) -> mx.array:
    """Paged attention on the GPU with a chosen (or the automatic) schedule.

    Inputs follow reference/attention.py and must already be valid.
    Outputs are filled before the kernels run (MLX's fill gives them device
    memory; without a fill fast::cuda_kernel allocates managed memory, and
    recycling a device buffer as managed costs a synchronizing copy): with
    zeros, or with NaN when `poison_output`, so an element no thread writes
    shows up as NaN.
    """
    if mask not in (None, "causal"):
        raise NotImplementedError(f"mask={mask!r} is not supported (use None or 'causal')")
    batch, num_q_heads, num_queries, head_dim = query.shape
    if key_pages.shape[2] != page_size:
        raise ValueError(f"key_pages page axis={key_pages.shape[2]} differs from page_size={page_size}")
    if head_dim > MAX_HEAD_DIM:
        raise ValueError(f"head_dim={head_dim} is above the GPU kernels' limit {MAX_HEAD_DIM}")
    if query.size == 0:
        return mx.zeros(query.shape, dtype=query.dtype)
    plan = plan_launch(query.shape, query.dtype, key_pages.shape[1], page_size, block_table.shape[1],
                       schedule, num_splits, mma, mma_stages, mma_bulk)
    causal = mask == "causal"
    bits = scale_bits(head_dim**-0.5 if scale is None else scale)
    inputs = [query, key_pages, value_pages, block_table.astype(mx.int32), context_lens.astype(mx.int32)]
    fill = float("nan") if poison_output else 0.0

    def launch(stem: str, shared_bytes: int, args: list[mx.array], template: list[tuple[str, Any]],
               blocks: tuple[int, int], shape: tuple[int, ...], dtype: mx.Dtype) -> mx.array:
        (result,) = compiled(stem, shared_bytes)(
            inputs=args,
            template=template,
            grid=(THREADS_PER_BLOCK * blocks[0], blocks[1], 1),
            threadgroup=(THREADS_PER_BLOCK, 1, 1),
            output_shapes=[shape],
            output_dtypes=[dtype],
            init_value=fill,
        )
        return result

    if plan.schedule in ("decode", "split"):
        template = [
            ("T", query.dtype), ("HEAD_DIM", head_dim), ("ROWS", plan.rows), ("CAUSAL", causal),
            ("MMA", plan.mma), ("MMA_STAGES", plan.mma_stages),
            ("MMA_BULK", plan.mma_bulk), ("MMA_SWIZZLE", plan.swizzled_rows), ("TABLE", TABLE_PAGED),
            ("SCALE_BITS", bits),
        ]
        if plan.schedule == "decode":
            return launch("paged_decode", plan.shared_bytes, inputs, template, (plan.blocks, 1),
                          query.shape, query.dtype)
        scratch = launch("paged_decode_split", plan.shared_bytes, inputs, template, (plan.blocks, plan.splits),
                         (plan.scratch_words,), mx.float32)
        return split_output(scratch, plan, query.shape, query.dtype)
    if plan.schedule == "prefill_mma":
        template = [
            ("T", query.dtype), ("HEAD_DIM", head_dim), ("KEY_TILE", plan.key_tile), ("CAUSAL", causal),
            ("TABLE", TABLE_PAGED), ("SCALE_BITS", bits),
        ]
    else:
        template = [
            ("T", query.dtype), ("HEAD_DIM", head_dim), ("CAUSAL", causal), ("TABLE", TABLE_PAGED), ("SCALE_BITS", bits),
        ]
    return launch(f"paged_{plan.schedule}", plan.shared_bytes, inputs, template, (plan.blocks, 1),
                  query.shape, query.dtype)
