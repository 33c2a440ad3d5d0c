"""How fast can a paged K/V pool be streamed at all? The ceiling under the decode kernels.

Runs pagecheck/probes/paged_stream.cu, which reads every K/V slot of the
benchmark's decode shapes and does no attention math, with each copy
mechanism: the tensor-core walk's per-warp cp.async ring and its bulk-copy
(TMA) ring, plain 16-byte loads into registers, and a ring shared by the
block's warps (64-token tiles, by cp.async or bulk copies) in the same
shared memory. Pages are read
through the benchmark's shuffled block tables and through tables in pool
order. Kernel times come from the GPU's clock (pagecheck/gpu/clock.py); the
bandwidth is K/V bytes over kernel time. The gap between a mechanism's
figure here and the decode kernel's (gpu_profile) is what the math and its
scheduling cost; the gap between it and cuDNN is the mechanism's.

Needs a CUDA device, MLX's CUDA back-end and torch. A program, not a test:

    python -m pagecheck.gpu.stream_probe [--shapes 64x4096,16x16384] [--stages 2,3,4] [--json PATH]
"""

from __future__ import annotations

import argparse
import sys
from functools import cache
from typing import Any

import mlx.core as mx

from pagecheck import ext
from pagecheck.gpu import bench as bench_gpu

from pagecheck.gpu import kernels as gpu_kernels

from pagecheck.gpu import program as gpu_program
from pagecheck.arg_types import int_list, positive_int
from pagecheck.gpu.profile import in_order_table, parse_shapes

PROBE_SOURCE = gpu_kernels.STREAM_PROBE
MODES = {"cp.async ring": 0, "bulk-copy ring": 1, "registers": 2, "block cp.async ring": 3,
         "block bulk ring": 4, "cp.async ring, padded rows": 5}
PADDED_MODES = (1, 4, 5)  # rows padded by 8 elements instead of swizzled (paged_mma.cuh, SharedRows)
WARPS = 4
# The planner's constants: the tensor-core walk's rows per block and its least ring depth.
PLAN_CONSTANTS = ext.gpu_plan_constants()


@cache
def probe_kernel(shared_bytes: int) -> Any:
    header, body = PROBE_SOURCE.read()
    return mx.fast.cuda_kernel(
        name=gpu_kernels.kernel_name(PROBE_SOURCE), input_names=list(PROBE_SOURCE.inputs),
        output_names=list(PROBE_SOURCE.outputs), source=body, header=header, ensure_row_contiguous=True,
        shared_memory=shared_bytes)


def stream(s: bench_gpu.InputSet, table: mx.array, lens: mx.array, mode: int, stages: int) -> mx.array:
    # The ring of the tensor-core walk at this depth (its merge region is smaller).
    shared = 0 if mode == 2 else ext.gpu_decode_shared_bytes(
        bench_gpu.HEAD_DIM, PLAN_CONSTANTS["decode_mma_rows"], "bfloat16", tensor_cores=True, mma_stages=stages,
        swizzled_rows=mode not in PADDED_MODES)
    blocks = table.shape[0] * bench_gpu.NUM_KV_HEADS
    (out,) = probe_kernel(shared)(
        inputs=[s.key_pages, s.value_pages, table, lens],
        template=[("T", mx.bfloat16), ("HEAD_DIM", bench_gpu.HEAD_DIM), ("STAGES", stages), ("MODE", mode)],
        grid=(blocks * WARPS * 32, 1, 1), threadgroup=(WARPS * 32, 1, 1),
        output_shapes=[(blocks * WARPS * 32,)], output_dtypes=[mx.float32], init_value=0.0)
    return out


def probe_us(sets: list[bench_gpu.InputSet], ordered: bool, mode: int, stages: int, calls: int) -> float:
    """Mean GPU time of the probe kernel over `calls` chained calls (each call's context
    lengths depend on the previous output, so calls cannot overlap); NaN when none was traced."""
    tables = [in_order_table(s) if ordered else s.block_table for s in sets]
    mx.eval(tables)

    def link(previous: mx.array | None, i: int) -> mx.array:
        s = sets[i % len(sets)]
        lens = s.context_lens if previous is None else s.context_lens + (previous[0] * 0).astype(mx.int32)
        return stream(s, tables[i % len(sets)], lens, mode, stages)

    mx.eval(link(None, 0))  # compile outside the trace
    kernels = bench_gpu.gpu_chain(link, calls)["kernels"]
    probe = [info["mean_us"] for name, info in kernels.items() if PROBE_SOURCE.stem in name]
    return probe[0] if probe else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", type=parse_shapes, default=parse_shapes("64x4096,16x16384"), metavar="BxCTX,...")
    parser.add_argument("--stages", type=int_list("stages", least=PLAN_CONSTANTS["min_mma_stages"]),
                        default=(2, 3, 4), metavar="N,N",
                        help="ring depths of the two ring modes (default 2,3,4)")
    parser.add_argument("--calls", type=positive_int, default=50, help="chained calls per measurement (default 50)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    why_not = gpu_program.cannot_run(needs_gpu_clock=True)
    if why_not:
        print(why_not)
        return gpu_program.CANNOT_RUN
    rows = []
    for batch, context in args.shapes:
        kv_bytes = bench_gpu.kv_bytes_of(batch, context)
        sets = bench_gpu.input_sets(batch, 1, context)
        for mode_name, mode in MODES.items():
            for stages in ((0,) if mode == 2 else args.stages):
                for ordered in (False, True):
                    us = probe_us(sets, ordered, mode, max(stages, PLAN_CONSTANTS["min_mma_stages"]), args.calls)
                    row = {"batch": batch, "context": context, "mode": mode_name, "stages": stages,
                           "pages": "in order" if ordered else "shuffled", "us": us, "tb_per_s": kv_bytes / us / 1e6}
                    rows.append(row)
                    print(f"B {batch:3d} ctx {context:6d} {mode_name:19s} stages {stages} {row['pages']:9s} "
                          f"{us:8.1f} us {row['tb_per_s']:5.2f} TB/s", flush=True)
        del sets
        mx.clear_cache()
    gpu_program.write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
