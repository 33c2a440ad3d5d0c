"""GPU benchmark of paged attention against gather-then-dense and dense SDPA baselines.

Shapes: decode for B in {1, 16, 64} x context {128, 1024, 4096, 16384} and one
prefill (L=512 over a 4096 context); H_q 32, H_kv 8, D 128, bfloat16, pages
of 128 (the Qwen3-4B decode heads). Variants:

- paged:            the direct paged kernels through pagecheck.gpu.kernels
                    (the automatic plan)
- paged[one pass]:  the one-pass decode kernel forced, where the automatic
                    schedule splits the context
- paged[cuda cores]: the CUDA-core decode walk forced (the automatic choice
                    for bfloat16 is the tensor-core walk)
- paged[ext op]:    ext.paged_attention, the C++ op (same kernels, chosen by
                    its eval_gpu)
- paged[stages N]:  the tensor-core decode walk with an N-stage copy ring
                    (only with --mma-stages; the op's choice is
                    ext.gpu_plan_constants()["decode_mma_stages"])
- paged[splits N]:  the decode with its context split N ways (only with
                    --splits; the op's split rule is the planner's,
                    ext/src/common/gpu_plan.cpp)
- paged[bulk copies, stages N]: the tensor-core walk with its ring filled by
                    bulk (TMA) row copies instead of cp.async (only with
                    --bulk; sm_90+; measured no faster, so not the op's choice)
- gather+mlx_sdpa:  gather K/V from the pages into dense tensors, then MLX SDPA
- mlx_sdpa:         MLX SDPA on K/V gathered beforehand
- torch_cudnn:      PyTorch SDPA, cuDNN backend, enable_gqa=True, on dense
                    K/V of the same shapes (prefill: no mask, cuDNN's causal
                    mask aligns to the top left, which is less work)

Times per variant: `per_call`, the median of synchronized single calls
(host overhead included), and `kernel`, the time per call of many calls run
back to back on the device, rotating among enough input sets that the L2
cache cannot serve them. MLX runs independent graph nodes concurrently, so
the MLX calls are chained (each query is the set's query plus 0 x the
previous output) and the cost of that chain alone is subtracted; the torch
calls are captured in one CUDA graph and replayed. With torch present,
`kernel` is read from the GPU's own clock (CUPTI kernel timestamps through
torch's profiler, pagecheck/gpu/clock.py: the time during which at least
one of the call's kernels ran, fills included, each moment once where MLX
runs two kernels at the same time) and `chained` keeps the wall-clock
figure; without torch, `kernel` is the wall-clock figure. Where the GPU is
the slower side the two agree within a few percent (measured on the H200); where
the host is (small shapes), the wall clock measures the host's submit time
and the GPU clock the kernels. Bandwidth is
the K/V bytes the attention must read over the kernel time, also as a
fraction of a device-to-device copy measured in the same run. A program, not
a test:

    python -m pagecheck.gpu.bench [--json PATH] [--only decode|prefill] [--quick]

`pagecheck bench --device gpu` runs the same measurement and writes it as a
report (bench_gpu.md, bench_gpu.json) with the speed goals judged.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

import mlx.core as mx

from pagecheck import ext
from pagecheck.impl.page_gather import gather_pages_dense
from pagecheck.gpu import clock as gpu_clock
from pagecheck.gpu import kernels as gpu_kernels
from pagecheck.gpu import program as gpu_program
from pagecheck.gpu.goals import BATCHED_DECODE_SHAPES, SINGLE_SHAPE
from pagecheck.arg_types import int_list

NUM_Q_HEADS = 32
NUM_KV_HEADS = 8
HEAD_DIM = 128
PAGE_SIZE = 128
DECODE_BATCHES = (1, 16, 64)
DECODE_CONTEXTS = (128, 1024, 4096, 16384)
PREFILL_SHAPE = (1, 512, 4096)  # (batch, queries, context)
# Prefill shapes a run times: the default one, and a batched long one (issue 21's second prefill goal).
PREFILL_SHAPES = (PREFILL_SHAPE, (4, 2048, 8192))
L2_FALLBACK_BYTES = 60 * 2**20
# Rotating input sets must cover this multiple of the L2 cache.
L2_MULTIPLE = 3
MAX_SETS = 256
KERNEL_TARGET_SECONDS = 0.05
PER_CALL_REPEATS = 15
# Chained calls traced per variant for the GPU-clock kernel time.
GPU_CLOCK_CALLS = 100


@dataclass
class Row:
    kind: str
    batch: int
    queries: int
    context: int
    variant: str
    per_call_us: float
    kernel_us: float
    kv_bytes: int
    tb_per_s: float
    copy_fraction: float
    tflop_per_s: float
    note: str = ""
    # The wall-clock chain measure (chain minus chain alone), kept beside a GPU-clock kernel_us.
    chained_us: float | None = None
    # Which clock kernel_us comes from: "gpu" (CUPTI kernel intervals, their union) or "wall".
    clock: str = "wall"


@dataclass
class InputSet:
    query: mx.array
    key_pages: mx.array
    value_pages: mx.array
    block_table: mx.array
    context_lens: mx.array
    dense_k: mx.array
    dense_v: mx.array


def make_set(batch: int, queries: int, context: int, key: mx.array) -> InputSet:
    """Random bf16 pages in a shuffled page order, and the same K/V gathered densely."""
    pages_per_row = context // PAGE_SIZE
    num_pages = batch * pages_per_row
    k1, k2, k3, k4 = mx.random.split(key, 4)
    shape = (num_pages, NUM_KV_HEADS, PAGE_SIZE, HEAD_DIM)
    key_pages = mx.random.normal(shape, key=k1).astype(mx.bfloat16)
    value_pages = mx.random.normal(shape, key=k2).astype(mx.bfloat16)
    table = mx.random.permutation(num_pages, key=k3).astype(mx.int32).reshape(batch, pages_per_row)
    query = mx.random.normal((batch, NUM_Q_HEADS, queries, HEAD_DIM), key=k4).astype(mx.bfloat16)
    lens = mx.full((batch,), context, dtype=mx.int32)
    dense_k, dense_v = gather_pages_dense(key_pages, table), gather_pages_dense(value_pages, table)
    mx.eval(query, key_pages, value_pages, table, lens, dense_k, dense_v)
    return InputSet(query, key_pages, value_pages, table, lens, dense_k, dense_v)


def l2_bytes() -> int:
    try:
        import torch

        return int(torch.cuda.get_device_properties(0).L2_cache_size)
    except Exception:
        return L2_FALLBACK_BYTES


def chained(query: mx.array, previous: mx.array | None) -> mx.array:
    """The query made to depend on the previous call's output (values unchanged)."""
    return query if previous is None else query + previous * 0


def build_chain(calls: Callable[[mx.array | None, int], mx.array], count: int) -> list[mx.array]:
    """`count` calls, each fed the previous one's output, as one lazy graph."""
    previous = None
    outs = []
    for i in range(count):
        previous = calls(previous, i)
        outs.append(previous)
    return outs


def time_chain(calls: Callable[[mx.array | None, int], mx.array], count: int) -> float:
    """Wall seconds per link of `count` chained calls evaluated as one graph (best of 3)."""
    runs = []
    for _ in range(3):
        outs = build_chain(calls, count)
        mx.synchronize()
        start = time.perf_counter()
        mx.eval(outs)
        mx.synchronize()
        runs.append((time.perf_counter() - start) / count)
        del outs
    return min(runs)


def gpu_chain(calls: Callable[[mx.array | None, int], mx.array], count: int) -> dict[str, Any]:
    """`count` chained calls traced on the GPU's clock: gpu_clock.summarize's per-link summary."""
    outs = build_chain(calls, count)
    mx.synchronize()

    def run() -> None:
        mx.eval(outs)
        mx.synchronize()

    return gpu_clock.summarize(gpu_clock.kernel_events(run), count)


def gpu_seconds(calls: Callable[[mx.array | None, int], mx.array], count: int) -> float:
    """GPU seconds of kernels per link of `count` chained calls (NaN when no kernel was seen)."""
    return gpu_clock.occupied_seconds(gpu_chain(calls, count))


def kv_bytes_of(batch: int, context: int) -> int:
    """K and V bytes one call reads (bfloat16)."""
    return batch * context * NUM_KV_HEADS * HEAD_DIM * 2 * 2


def set_count(kv_bytes: int) -> int:
    """Input sets whose rotation covers L2_MULTIPLE times the L2 cache in K/V."""
    return max(2, min(MAX_SETS, math.ceil(L2_MULTIPLE * l2_bytes() / kv_bytes)))


def input_sets(batch: int, queries: int, context: int) -> list[InputSet]:
    return [make_set(batch, queries, context, mx.random.key(i)) for i in range(set_count(kv_bytes_of(batch, context)))]


def time_mlx(call: Callable[[InputSet, mx.array], mx.array], sets: list[InputSet],
             use_gpu_clock: bool) -> tuple[float, float, float]:
    """(median synchronized per-call seconds, chained wall seconds per call, GPU kernel seconds per call).

    The chain's own links (query + 0 x previous) are subtracted from both.
    The wall figure includes the host's submit time wherever the host is the
    slower side (small shapes); the GPU-clock figure (NaN when
    `use_gpu_clock` is off) is the kernels' own time.
    """
    mx.eval(call(sets[0], sets[0].query))  # compile and warm up
    mx.synchronize()
    singles = []
    for i in range(PER_CALL_REPEATS):
        s = sets[i % len(sets)]
        start = time.perf_counter()
        mx.eval(call(s, s.query))
        mx.synchronize()
        singles.append(time.perf_counter() - start)
    per_call = statistics.median(singles)
    count = max(len(sets), min(1000, math.ceil(KERNEL_TARGET_SECONDS / per_call)))
    count = math.ceil(count / len(sets)) * len(sets)

    def attention(previous: mx.array | None, i: int) -> mx.array:
        s = sets[i % len(sets)]
        return call(s, chained(s.query, previous))

    def chain_only(previous: mx.array | None, i: int) -> mx.array:
        return chained(sets[i % len(sets)].query, previous)

    chained_wall = time_chain(attention, count) - time_chain(chain_only, count)
    gpu = float("nan")
    if use_gpu_clock:
        links = min(count, GPU_CLOCK_CALLS)
        gpu = gpu_seconds(attention, links) - gpu_seconds(chain_only, links)
    return per_call, chained_wall, gpu


def time_torch(call: Callable[[int], Any], num_sets: int, use_gpu_clock: bool) -> tuple[float, float, float, str]:
    """(median synchronized per-call seconds, replayed wall seconds per call, GPU kernel seconds per call
    (NaN when `use_gpu_clock` is off), how)."""
    import torch

    call(0)
    torch.cuda.synchronize()
    singles = []
    for i in range(PER_CALL_REPEATS):
        start = time.perf_counter()
        call(i % num_sets)
        torch.cuda.synchronize()
        singles.append(time.perf_counter() - start)
    per_call = statistics.median(singles)
    count = max(num_sets, min(1000, math.ceil(KERNEL_TARGET_SECONDS / per_call)))
    count = math.ceil(count / num_sets) * num_sets

    def replay() -> Callable[[], None]:
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for i in range(num_sets):  # warm-up on the capture stream
                call(i)
        torch.cuda.current_stream().wait_stream(stream)
        with torch.cuda.graph(graph):
            for i in range(count):
                call(i % num_sets)
        return graph.replay

    try:
        run, how = replay(), "graph"
    except Exception as err:  # eager launches still serialize on one stream
        def run() -> None:
            for i in range(count):
                call(i % num_sets)

        how = f"eager ({type(err).__name__})"
    runs = []
    for _ in range(3):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        run()
        end.record()
        torch.cuda.synchronize()
        runs.append(begin.elapsed_time(end) / 1e3 / count)
    gpu = float("nan")
    if use_gpu_clock:
        def replayed() -> None:
            run()
            torch.cuda.synchronize()

        gpu = gpu_clock.occupied_seconds(gpu_clock.summarize(gpu_clock.kernel_events(replayed), count))
    return per_call, min(runs), gpu, how


def copy_bandwidth() -> float:
    """Device-to-device copy, bytes read plus written per second (torch)."""
    import torch

    src = torch.empty(2 * 2**30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(10):
        dst.copy_(src)
    end.record()
    torch.cuda.synchronize()
    seconds = begin.elapsed_time(end) / 1e3 / 10
    del src, dst
    torch.cuda.empty_cache()
    return 2 * 2 * 2**30 / seconds


def torch_sdpa(batch: int, queries: int, context: int, num_sets: int, causal: bool) -> tuple[Callable[[int], Any], str, list[Any]]:
    """A cuDNN SDPA call over `num_sets` random dense inputs; falls back to the default backend."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    tensors = [
        (
            torch.randn(batch, NUM_Q_HEADS, queries, HEAD_DIM, device="cuda", dtype=torch.bfloat16),
            torch.randn(batch, NUM_KV_HEADS, context, HEAD_DIM, device="cuda", dtype=torch.bfloat16),
            torch.randn(batch, NUM_KV_HEADS, context, HEAD_DIM, device="cuda", dtype=torch.bfloat16),
        )
        for _ in range(num_sets)
    ]
    del causal  # see the module docstring: the baseline runs unmasked

    def run(backend: Any) -> Callable[[int], Any]:
        def call(i: int) -> Any:
            q, k, v = tensors[i]
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

        return call

    try:
        call = run(SDPBackend.CUDNN_ATTENTION)
        call(0)
        return call, "cudnn", tensors
    except Exception as err:  # report which backend actually ran
        call = run([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])
        return call, f"fallback ({type(err).__name__})", tensors


def attention_flops(batch: int, queries: int, context: int, causal: bool) -> int:
    """2 flops per multiply-add, Q K^T and P V, over the visible (query, key) pairs."""
    if causal:
        pairs = queries * (context - queries) + queries * (queries + 1) // 2
    else:
        pairs = queries * context
    return 4 * batch * NUM_Q_HEADS * HEAD_DIM * pairs


def kernel_time(wall: float, gpu: float) -> tuple[float, str]:
    """The kernel time a row reports and its clock: the GPU's where it was read, else the wall clock's."""
    return (gpu, "gpu") if math.isfinite(gpu) else (wall, "wall")


def bench_shape(kind: str, batch: int, queries: int, context: int, copy_bw: float, use_torch: bool,
                extension_paged_attention: Callable[..., mx.array] | None,
                mma_stages: tuple[int, ...] = (), splits: tuple[int, ...] = (), bulk: bool = False) -> list[Row]:
    kv_bytes = kv_bytes_of(batch, context)
    # Each variant reads one copy of K/V per call (pages or dense).
    sets = input_sets(batch, queries, context)
    mask = "causal" if kind == "prefill" else None
    flops = attention_flops(batch, queries, context, mask == "causal")
    scale = HEAD_DIM**-0.5

    def paged(schedule: str | None = None, tensor_cores: bool | None = None, stages: int | None = None,
              splits: int | None = None, bulk: bool = False) -> Callable[[InputSet, mx.array], mx.array]:
        return lambda s, q: gpu_kernels.paged_attention(
            q, s.key_pages, s.value_pages, s.block_table, s.context_lens, PAGE_SIZE,
            scale=scale, mask=mask, schedule=schedule, tensor_cores=tensor_cores, mma_stages=stages, splits=splits,
            bulk=bulk,
        )

    def sdpa(q: mx.array, k: mx.array, v: mx.array) -> mx.array:
        return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask)

    variants: list[tuple[str, Callable[[InputSet, mx.array], mx.array]]] = [("paged", paged())]
    plan = gpu_kernels.launch_plan((batch, NUM_Q_HEADS, queries, HEAD_DIM), mx.bfloat16, NUM_KV_HEADS,
                                   PAGE_SIZE, context // PAGE_SIZE)
    constants = ext.gpu_plan_constants()
    if kind == "decode":
        if plan["schedule"] == "paged_decode_split":
            variants.append(("paged[one pass]", paged("paged_decode")))
        variants.append(("paged[cuda cores]", paged(tensor_cores=False)))
        variants += [(f"paged[stages {n}]", paged(stages=n)) for n in mma_stages]
        if bulk:
            variants += [(f"paged[bulk copies, stages {n}]", paged(stages=n, bulk=True))
                         for n in sorted({constants["decode_mma_stages"], *mma_stages})]
        variants += [(f"paged[splits {n}]", paged(schedule="paged_decode" if n == 1 else "paged_decode_split",
                                                   splits=n))
                     for n in splits if n <= max(1, context // constants["min_split_positions"])]
    if extension_paged_attention is not None:
        variants.append(("paged[ext op]", lambda s, q: extension_paged_attention(
            q, s.key_pages, s.value_pages, s.block_table, s.context_lens, PAGE_SIZE, scale, mask == "causal")))
    variants += [
        ("gather+mlx_sdpa", lambda s, q: sdpa(
            q, gather_pages_dense(s.key_pages, s.block_table), gather_pages_dense(s.value_pages, s.block_table))),
        ("mlx_sdpa", lambda s, q: sdpa(q, s.dense_k, s.dense_v)),
    ]

    use_gpu_clock = use_torch and gpu_clock.available()

    def row(name: str, per_call: float, wall: float, gpu: float, row_flops: int, note: str = "") -> Row:
        kernel, clock = kernel_time(wall, gpu)
        return Row(kind, batch, queries, context, name, per_call * 1e6, kernel * 1e6, kv_bytes,
                   kv_bytes / kernel / 1e12, kv_bytes / kernel / copy_bw, row_flops / kernel / 1e12, note,
                   wall * 1e6, clock)

    out = []
    for name, call in variants:
        out.append(row(name, *time_mlx(call, sets, use_gpu_clock), flops))
    del sets
    mx.clear_cache()
    if use_torch:
        import torch

        torch_sets = set_count(kv_bytes)
        call, backend, tensors = torch_sdpa(batch, queries, context, torch_sets, kind == "prefill")
        per_call, wall, gpu, how = time_torch(call, torch_sets, use_gpu_clock)
        note = f"{backend}, {how}" + (", no mask" if kind == "prefill" else "")
        out.append(row("torch_cudnn", per_call, wall, gpu, attention_flops(batch, queries, context, False), note))
        del tensors, call
        torch.cuda.empty_cache()
    return out


def print_rows(rows: list[Row]) -> None:
    head = (f"{'kind':8} {'B':>3} {'L':>4} {'ctx':>6} {'variant':18} {'per_call_us':>11} {'kernel_us':>10} "
            f"{'clock':>5} {'chained_us':>10} {'TB/s':>6} {'of copy':>7} {'TFLOP/s':>8}  note")
    print(head)
    for r in rows:
        fraction = f"{r.copy_fraction:>7.0%}" if finite_or_none(r.copy_fraction) is not None else f"{'-':>7}"
        chained = "-" if finite_or_none(r.chained_us) is None else f"{r.chained_us:.1f}"
        print(f"{r.kind:8} {r.batch:>3} {r.queries:>4} {r.context:>6} {r.variant:18} {r.per_call_us:>11.1f} "
              f"{r.kernel_us:>10.1f} {r.clock:>5} {chained:>10} {r.tb_per_s:>6.2f} {fraction} {r.tflop_per_s:>8.1f}  "
              f"{r.note}")


# Every shape a decode goal names (pagecheck/gpu/goals.py).
QUICK_DECODE_SHAPES = (SINGLE_SHAPE, *BATCHED_DECODE_SHAPES)


def bench_shapes(quick: bool = False, only: str | None = None) -> list[tuple[str, int, int, int]]:
    """(kind, batch, queries, context) of every shape a run times: the goal shapes when quick."""
    shapes: list[tuple[str, int, int, int]] = []
    if only in (None, "decode"):
        pairs = QUICK_DECODE_SHAPES if quick else tuple((b, c) for b in DECODE_BATCHES for c in DECODE_CONTEXTS)
        shapes += [("decode", b, 1, c) for b, c in pairs]
    if only in (None, "prefill"):
        shapes += [("prefill", *shape) for shape in PREFILL_SHAPES]
    return shapes


def extension_paged_attention() -> tuple[Callable[..., mx.array] | None, str | None]:
    """(ext.paged_attention, None), or (None, why) when the extension does not import."""
    try:
        from pagecheck import ext
    except ImportError as err:
        return None, str(err)
    return ext.paged_attention, None


def finite_or_none(value: Any) -> Any:
    return value if not isinstance(value, float) or math.isfinite(value) else None


def configuration(shapes: list[tuple[str, int, int, int]], use_torch: bool, has_extension: bool) -> dict[str, Any]:
    """What a run measures: its shapes, the fixed heads, dtype and page size, and which baselines ran."""
    return {
        "shapes": [list(shape) for shape in shapes],
        "num_q_heads": NUM_Q_HEADS,
        "num_kv_heads": NUM_KV_HEADS,
        "head_dim": HEAD_DIM,
        "page_size": PAGE_SIZE,
        "dtype": "bfloat16",
        "torch": use_torch,
        "ext": has_extension,
    }


def run_gpu_bench(
    shapes: list[tuple[str, int, int, int]],
    use_torch: bool,
    extension_paged_attention: Callable[..., mx.array] | None,
    mma_stages: tuple[int, ...] = (),
    splits: tuple[int, ...] = (),
    on_shape: Callable[[int, int, list[Row]], None] | None = None,
    bulk: bool = False,
) -> dict[str, Any]:
    """Every shape's rows as a JSON-ready document ({"configuration", "copy_tb_per_s", "rows"}; None
    where a number needs torch and torch is left out). `on_shape(done, total, rows)` after each shape."""
    copy_bw = copy_bandwidth() if use_torch else float("nan")
    rows: list[Row] = []
    for done, (kind, batch, queries, context) in enumerate(shapes, start=1):
        found = bench_shape(kind, batch, queries, context, copy_bw, use_torch, extension_paged_attention, mma_stages,
                            splits, bulk)
        rows += found
        if on_shape is not None:
            on_shape(done, len(shapes), found)
    return {
        "configuration": configuration(shapes, use_torch, extension_paged_attention is not None),
        "copy_tb_per_s": finite_or_none(copy_bw / 1e12),
        "rows": [{key: finite_or_none(value) for key, value in asdict(r).items()} for r in rows],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None)
    parser.add_argument("--only", choices=("decode", "prefill"), default=None)
    parser.add_argument("--quick", action="store_true", help="the goal shapes only")
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument("--no-ext", action="store_true", help="leave out the C++ extension's op")
    parser.add_argument("--mma-stages", type=int_list("mma-stages", least=ext.gpu_plan_constants()["min_mma_stages"]),
                        default=(), metavar="N,N",
                        help="extra decode rows with these copy-ring depths of the tensor-core walk, e.g. 3,4")
    parser.add_argument("--splits", type=int_list("splits"), default=(), metavar="N,N",
                        help="extra decode rows with the context split these many ways, e.g. 1,2,4")
    parser.add_argument("--bulk", action="store_true",
                        help="extra decode rows whose tensor-core ring is filled by bulk (TMA) copies, sm_90+")
    args = parser.parse_args(argv)
    mma_stages, splits = args.mma_stages, args.splits
    why_not = gpu_program.cannot_run()
    if why_not:
        print(why_not)
        return gpu_program.CANNOT_RUN
    paged_op, why = (None, None) if args.no_ext else extension_paged_attention()
    if why:
        print(f"extension not importable, its row is left out: {why}")
    document = run_gpu_bench(bench_shapes(args.quick, args.only), not args.no_torch, paged_op,
                             mma_stages, splits, on_shape=lambda done, total, found: print_rows(found),
                             bulk=args.bulk)
    copy = document["copy_tb_per_s"]
    print(f"\ncopy bandwidth {copy:.2f} TB/s (read + write)" if copy else "\ncopy bandwidth not measured (no torch)")
    print("summary")
    print_rows([Row(**row) for row in document["rows"]])
    gpu_program.write_json(args.json, document)
    return 0


if __name__ == "__main__":
    sys.exit(main())
