"""Launch the paged-attention CUDA kernels of ext/kernels from Python.

The C++ extension is the production route (its eval_gpu runs the plan of
ext/src/common/gpu_plan.cpp). This module drives the very same kernel files
through mx.fast.cuda_kernel with the plan that the same planner gives through
the binding (pagecheck.ext.gpu_launch_plan), where a check or a benchmark may
pin a schedule, a split count, the decode walk, its ring depth, bulk copies or
the warpgroup prefill's block height that the automatic plan would not take.
The warpgroup prefill (sm_90a), which MLX's JIT cannot compile, comes compiled
from the extension (pagecheck.ext.gpu_prefill_wgmma_kernel) and runs through
mx.fast.precompiled_cuda_kernel. It holds the launch only: sources, template
arguments and grid.
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

from pagecheck import ext
from pagecheck.reference.tolerance import dtype_name


def _kernel_dir() -> Path:
    """ext/kernels, found without loading the extension module."""
    spec = importlib.util.find_spec("pagecheck.ext")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("pagecheck.ext is not importable; is pagecheck installed?")
    return Path(next(iter(spec.submodule_search_locations))) / "kernels"


KERNEL_DIR = _kernel_dir()

# The planner's constants (threads per block, split and ring limits), from the extension.
PLAN_CONSTANTS: dict[str, int] = ext.gpu_plan_constants()
# Where the kernels find pages and contexts (TABLE in paged_common.cuh): this
# launcher always passes a block table and context lengths.
TABLE_PAGED = 0

# The softmax scale is no input: it is the template arguments SCALE_BITS and SCALE_NEGATIVE (scale_of in
# paged_common.cuh).
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

    def read(self, compact: bool = True) -> tuple[str, str]:
        """(header, body) exactly as fast::cuda_kernel receives them from the op: compacted by the extension
        (`compact=False`: the files as written)."""
        from pagecheck import ext

        header = "".join((KERNEL_DIR / name).read_text() + "\n" for name in self.headers)
        body = (self.directory / f"{self.stem}.cu").read_text()
        if not compact:
            return header, body
        return ext.compact_kernel_source(header), ext.compact_kernel_source(body)


KERNELS: dict[str, KernelSource] = {
    "paged_decode": KernelSource("paged_decode", PAGED_INPUTS, ("out",), DECODE_HEADERS),
    "paged_decode_split": KernelSource("paged_decode_split", PAGED_INPUTS, ("scratch",), DECODE_HEADERS),
    "paged_prefill": KernelSource("paged_prefill", PAGED_INPUTS, ("out",), ("paged_common.cuh",)),
    "paged_prefill_mma": KernelSource(
        "paged_prefill_mma", PAGED_INPUTS, ("out",), ("paged_common.cuh", "paged_mma.cuh")
    ),
}

# Not an attention kernel: the streaming ceiling probe of pagecheck/gpu/stream_probe.py, which reads
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


def scale_bits(scale: float) -> tuple[int, bool]:
    """The float32 bit pattern of |scale| (a non-negative int) and its sign: template arguments SCALE_BITS and
    SCALE_NEGATIVE (MLX names a kernel after its template arguments, where a minus sign does not compile)."""
    bits = int(np.array(scale, dtype=np.float32).view(np.uint32))
    return bits & 0x7FFFFFFF, bool(bits >> 31)


def launch_plan(query_shape: tuple[int, ...], dtype: mx.Dtype, num_kv_heads: int, page_size: int,
                table_width: int, *, schedule: str | None = None, splits: int | None = None,
                tensor_cores: bool | None = None, mma_stages: int | None = None, bulk: bool = False,
                warpgroups: int | None = None, producer_registers: int | None = None) -> dict[str, Any]:
    """The planner's plan for a query of `query_shape` over pages of `page_size` in a table `table_width`
    wide on this machine's GPU: the op's own without pins (pagecheck.ext.gpu_launch_plan says what each
    pin and field means)."""
    batch, num_q_heads, num_queries, head_dim = query_shape
    return ext.gpu_launch_plan(batch, num_q_heads, num_queries, head_dim, num_kv_heads, page_size, table_width,
                               dtype_name(dtype), schedule=schedule, splits=splits, tensor_cores=tensor_cores,
                               mma_stages=mma_stages, bulk=bulk, warpgroup_mma=ext.gpu_warpgroup_mma(),
                               warpgroups=warpgroups, producer_registers=producer_registers)


# ---- Launch ---------------------------------------------------------------------


def split_output(scratch: mx.array, plan: dict[str, Any], shape: tuple[int, ...], dtype: mx.Dtype) -> mx.array:
    """The attention output inside the split kernel's scratch: a view of its out region, no copy."""
    return scratch[plan["out_begin_words"]:].view(dtype)[: math.prod(shape)].reshape(shape)


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
    splits: int | None = None,
    tensor_cores: bool | None = None,
    mma_stages: int | None = None,
    bulk: bool = False,
    warpgroups: int | None = None,
    producer_registers: int | None = None,
    poison_output: bool = False,
) -> mx.array:
    """Paged attention on the GPU with the automatic plan, or with the pins of launch_plan.

    Inputs follow reference/attention.py and must already be valid.
    Outputs are filled before the kernels run (MLX's fill gives them device
    memory; without a fill fast::cuda_kernel allocates managed memory, and
    recycling a device buffer as managed costs a synchronizing copy): with
    zeros, or with NaN when `poison_output`, so an element no thread writes
    shows up as NaN.
    """
    if mask not in (None, "causal"):
        raise NotImplementedError(f"mask={mask!r} is not supported (use None or 'causal')")
    head_dim = query.shape[3]
    if key_pages.shape[2] != page_size:
        raise ValueError(f"key_pages page axis={key_pages.shape[2]} differs from page_size={page_size}")
    if head_dim > PLAN_CONSTANTS["max_head_dim"]:
        raise ValueError(f"head_dim={head_dim} is above the GPU kernels' limit {PLAN_CONSTANTS['max_head_dim']}")
    if query.size == 0:
        return mx.zeros(query.shape, dtype=query.dtype)
    plan = launch_plan(query.shape, query.dtype, key_pages.shape[1], page_size, block_table.shape[1],
                       schedule=schedule, splits=splits, tensor_cores=tensor_cores, mma_stages=mma_stages, bulk=bulk,
                       warpgroups=warpgroups, producer_registers=producer_registers)
    causal = mask == "causal"
    bits, negative = scale_bits(head_dim**-0.5 if scale is None else scale)
    # As the op: lengths of one or two requests are read from a device copy (ext/src/paged_attention/resident_lens.h).
    lens = ext.device_resident_lens(context_lens.astype(mx.int32))
    inputs = [query, key_pages, value_pages, block_table.astype(mx.int32), lens]
    threads = plan["threads"]
    fill = float("nan") if poison_output else 0.0

    def launch(template: list[tuple[str, Any]], grid_y: int, shape: tuple[int, ...], dtype: mx.Dtype) -> mx.array:
        (result,) = compiled(plan["schedule"], plan["shared_bytes"])(
            inputs=inputs,
            template=[("T", query.dtype), ("HEAD_DIM", head_dim), *template, ("TABLE", TABLE_PAGED),
                      ("SCALE_BITS", bits), ("SCALE_NEGATIVE", negative)],
            grid=(threads * plan["blocks"], grid_y, 1),
            threadgroup=(threads, 1, 1),
            output_shapes=[shape],
            output_dtypes=[dtype],
            init_value=fill,
        )
        return result

    decode_walk = [("ROWS", plan["rows"]), ("CAUSAL", causal), ("MMA", plan["mma"]),
                   ("MMA_STAGES", plan["mma_stages"]), ("MMA_BULK", plan["bulk"]),
                   ("MMA_SWIZZLE", plan["swizzled_rows"])]
    if plan["schedule"] == "paged_decode":
        return launch(decode_walk, 1, query.shape, query.dtype)
    if plan["schedule"] == "paged_decode_split":
        scratch = launch(decode_walk, plan["splits"], (plan["scratch_words"],), mx.float32)
        return split_output(scratch, plan, query.shape, query.dtype)
    if plan["schedule"] == "paged_prefill_wgmma":
        name, image, _ = ext.gpu_prefill_wgmma_kernel(dtype_name(query.dtype), head_dim, plan["key_tile"],
                                                      plan["mma_stages"], plan["warpgroups"], causal, TABLE_PAGED,
                                                      bits, negative, plan["producer_registers"])
        # The shapes the other kernels read from MLX's signature, as the kernel's int scalars.
        geometry = [*query.shape, *key_pages.shape[:3], block_table.shape[1]]
        (result,) = mx.fast.precompiled_cuda_kernel(
            name=name, compiled_source=image, inputs=inputs, output_shapes=[query.shape], output_dtypes=[query.dtype],
            scalars=geometry, grid=(threads * plan["blocks"], 1, 1), threadgroup=(threads, 1, 1),
            shared_memory=plan["shared_bytes"], init_value=fill, ensure_row_contiguous=True,
        )
        return result
    if plan["schedule"] == "paged_prefill_mma":
        return launch([("KEY_TILE", plan["key_tile"]), ("CAUSAL", causal)], 1, query.shape, query.dtype)
    if plan["schedule"] == "paged_prefill":
        return launch([("CAUSAL", causal)], 1, query.shape, query.dtype)
    raise NotImplementedError(f"schedule={plan['schedule']!r} has no launch here")
