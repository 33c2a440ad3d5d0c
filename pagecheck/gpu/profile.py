"""Where a chained call's device time goes: every GPU kernel of the call, timed by the GPU.

bench_gpu reports one kernel time per call; this program breaks it down. It
runs the same chained calls under PyTorch's profiler, whose CUPTI tracing
records every kernel launched in the process (MLX's included) with the GPU's
own start and end times, so a slow kernel shows apart from extra kernels
(output fills, the chain's own multiply and add) and from gaps between
kernels. Per variant and shape it prints:

- each kernel name: launches per call and mean duration,
- busy: the summed kernel time per call,
- occupied: the time at least one kernel ran, per call (bench_gpu's kernel
  time; below busy where MLX ran kernels side by side, such as the fills),
- span: first kernel start to last kernel end, per call (occupied + gaps).

`paged[pages in order]` reads the same pools through a table that walks them
in pool order instead of the benchmark's shuffled order: the difference is
what scattered pages cost (address translation, DRAM locality).
`paged[pages in L2]` reads its rows through a table that cycles over only as
many pages as fill a third of the L2 cache, so K/V come from L2, not DRAM:
the walk's own pace, the bound a pair of calls sharing their reads through
L2 could reach (with --splits, `paged[split decode, N splits, pages in L2]`
pins the split count as well).
`paged[split decode, N splits]` (with --splits N,...) runs the split decode
with its context split N ways, also where the planner would run one pass: at
N = 1 its walk is the one-pass decode's, so the difference between the two
is what the split's partial store, ticket and merge cost.

Needs a CUDA device, MLX's CUDA back-end and torch. A program, not a test:

    python -m pagecheck.gpu.profile [--shapes 64x4096,16x16384] [--calls N] [--json PATH] [--splits 1,16]
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, Callable

import mlx.core as mx

from pagecheck.gpu import bench as bench_gpu

from pagecheck.gpu import kernels as gpu_kernels

from pagecheck.gpu import program as gpu_program
from pagecheck import ext
from pagecheck.arg_types import int_list, positive_int

DEFAULT_SHAPES = "1x16384,16x1024,16x4096,16x16384,64x1024,64x4096,64x16384"


def parse_shapes(text: str) -> list[tuple[int, int]]:
    """'64x4096,16x16384' -> [(64, 4096), (16, 16384)]; ValueError names the bad item."""
    shapes = []
    for item in text.split(","):
        parts = item.strip().lower().split("x")
        if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise argparse.ArgumentTypeError(f"shape {item!r} is not BATCHxCONTEXT with positive integers")
        batch, context = int(parts[0]), int(parts[1])
        if context % bench_gpu.PAGE_SIZE:
            raise argparse.ArgumentTypeError(f"shape {item!r}: context must be a multiple of {bench_gpu.PAGE_SIZE}")
        shapes.append((batch, context))
    return shapes


def split_counts(option: str) -> Callable[[str], tuple[int, ...]]:
    """A type for --OPTION 1,2: split counts to pin, each in 1..the planner's most, repeats dropped."""

    def parse(text: str) -> tuple[int, ...]:
        most = int(ext.gpu_plan_constants()["max_splits"])
        return tuple(dict.fromkeys(int_list(option, most=most)(text)))

    return parse


def variant_names(text: str) -> list[str]:
    """'paged,paged[split decode, 2 splits, pages in L2]' -> the two names: commas inside brackets stay."""
    return [name.strip() for name in re.split(r",(?![^\[]*\])", text) if name.strip()]


def split_variant(splits: int, in_l2: bool = False) -> str:
    return f"paged[split decode, {splits} splits{', pages in L2' if in_l2 else ''}]"


def profile_chain(call: Callable[[bench_gpu.InputSet, mx.array], mx.array], sets: list[bench_gpu.InputSet],
                  calls: int) -> dict[str, Any]:
    mx.eval(call(sets[0], sets[0].query))  # compile outside the trace
    mx.synchronize()
    return bench_gpu.gpu_chain(lambda previous, i: call(sets[i % len(sets)], bench_gpu.chained(
        sets[i % len(sets)].query, previous)), calls)


def in_order_table(s: bench_gpu.InputSet) -> mx.array:
    """The set's pages read in pool order (request r owns pages r * width ... (r + 1) * width - 1)."""
    batch, width = s.block_table.shape
    return mx.arange(batch * width, dtype=mx.int32).reshape(batch, width)


def l2_resident_table(s: bench_gpu.InputSet) -> mx.array:
    """The set's table in pool order, cycling over as many pages as a third of the L2 cache holds (K and V; at
    least one, at most the pool)."""
    page_bytes = 2 * s.key_pages.nbytes // s.key_pages.shape[0]  # one page id's K and V
    resident = max(1, min(s.key_pages.shape[0], bench_gpu.l2_bytes() // 3 // page_bytes))
    return in_order_table(s) % resident


Call = Callable[[bench_gpu.InputSet, mx.array], mx.array]


def variants(splits: tuple[int, ...] = ()) -> dict[str, Call]:
    """Every traceable call by name; `splits` adds the split decode pinned to each count."""
    scale = bench_gpu.HEAD_DIM**-0.5

    def paged(s: bench_gpu.InputSet, q: mx.array, table: mx.array, bulk: bool = False,
              pinned: int | None = None) -> mx.array:
        return gpu_kernels.paged_attention(q, s.key_pages, s.value_pages, table, s.context_lens,
                                           bench_gpu.PAGE_SIZE, scale=scale, bulk=bulk,
                                           schedule=None if pinned is None else "paged_decode_split", splits=pinned)

    tables: dict[tuple[int, Callable[[bench_gpu.InputSet], mx.array]], mx.array] = {}

    def made_once(make: Callable[[bench_gpu.InputSet], mx.array]) -> Callable[[bench_gpu.InputSet], mx.array]:
        """`make`'s table for each input set, made on its first call and kept (set identities key the cache)."""
        def table(s: bench_gpu.InputSet) -> mx.array:
            if (id(s), make) not in tables:
                tables[id(s), make] = make(s)
            return tables[id(s), make]
        return table

    ordered, in_l2 = made_once(in_order_table), made_once(l2_resident_table)

    found: dict[str, Call] = {
        "paged": lambda s, q: paged(s, q, s.block_table),
        "paged[pages in order]": lambda s, q: paged(s, q, ordered(s)),
        "paged[pages in L2]": lambda s, q: paged(s, q, in_l2(s)),
        "paged[bulk copies]": lambda s, q: paged(s, q, s.block_table, bulk=True),
        "paged[bulk copies in order]": lambda s, q: paged(s, q, ordered(s), bulk=True),
    }
    op, _ = bench_gpu.extension_paged_attention()
    if op is not None:
        found["paged[ext op]"] = lambda s, q: op(
            q, s.key_pages, s.value_pages, s.block_table, s.context_lens, bench_gpu.PAGE_SIZE, scale, False)
    for count in splits:
        found[split_variant(count)] = lambda s, q, count=count: paged(s, q, s.block_table, pinned=count)
        found[split_variant(count, in_l2=True)] = lambda s, q, count=count: paged(s, q, in_l2(s), pinned=count)
    found["mlx_sdpa"] = lambda s, q: mx.fast.scaled_dot_product_attention(q, s.dense_k, s.dense_v, scale=scale)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", type=parse_shapes, default=parse_shapes(DEFAULT_SHAPES), metavar="BxCTX,...",
                        help=f"decode shapes (default {DEFAULT_SHAPES})")
    parser.add_argument("--variants", default="paged,mlx_sdpa", metavar="NAME,...",
                        help="which calls to trace: paged, 'paged[pages in order]', 'paged[pages in L2]', "
                             "'paged[bulk copies]', 'paged[bulk copies in order]', 'paged[ext op]', mlx_sdpa, "
                             "and with --splits N "
                             "'paged[split decode, N splits, pages in L2]' (default paged,mlx_sdpa)")
    parser.add_argument("--splits", type=split_counts("splits"), default=(), metavar="N,N",
                        help="also trace the split decode pinned to these split counts, each in 1..the planner's "
                             "most (1: the one-pass walk plus the split's store, ticket and merge)")
    parser.add_argument("--calls", type=positive_int, default=200, help="chained calls per trace (default 200)")
    parser.add_argument("--json", default=None, help="also write the summaries here")
    args = parser.parse_args(argv)
    why_not = gpu_program.cannot_run(needs_gpu_clock=True)
    if why_not:
        print(why_not)
        return gpu_program.CANNOT_RUN
    known = variants(args.splits)
    chosen = variant_names(args.variants)
    chosen += [split_variant(count) for count in args.splits if split_variant(count) not in chosen]
    unknown = [name for name in chosen if name not in known]
    if unknown or not chosen:
        parser.error(f"--variants: unknown {unknown or 'empty list'}; known: {', '.join(known)}")
    document = []
    for batch, context in args.shapes:
        kv_bytes = bench_gpu.kv_bytes_of(batch, context)
        sets = bench_gpu.input_sets(batch, 1, context)
        chain_only = profile_chain(lambda s, q: q, sets, args.calls)
        # Fresh variants for each shape: their caches are keyed by the input sets' identities.
        calls = variants(args.splits)
        for name, call in [("chain only", None)] + [(name, calls[name]) for name in chosen]:
            found = chain_only if call is None else profile_chain(call, sets, args.calls)
            busy, occupied, span = found["busy_us"], found["occupied_us"], found["span_us"]
            tb = f"{kv_bytes / occupied / 1e6:.2f} TB/s occupied" if occupied else "no kernels seen"
            print(f"B {batch:3d} ctx {context:6d} {name:28s} busy {busy or 0:8.1f} us  occupied {occupied or 0:8.1f} us  "
                  f"span {span or 0:8.1f} us  {tb}")
            for kernel, info in sorted(found["kernels"].items(), key=lambda kv: -kv[1]["mean_us"] * kv[1]["per_call"]):
                print(f"    {info['per_call']:5.2f} x {info['mean_us']:8.1f} us  {kernel[:110]}")
            document.append({"batch": batch, "context": context, "variant": name, "kv_bytes": kv_bytes, **found})
        del sets
        mx.clear_cache()
    gpu_program.write_json(args.json, document)
    return 0


if __name__ == "__main__":
    sys.exit(main())
