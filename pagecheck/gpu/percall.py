"""Wall time per call of back-to-back calls, as a user's program sees it: impl.paged_attention against MLX SDPA.

Each measurement builds N calls (no evaluation in between), evaluates all
of them with one mx.eval, and divides the wall time by N; the median of
several repeats is reported, with its two halves: building the calls (the
Python call and graph construction) and evaluating them (the host's submit
work and the GPU's kernels, which overlap). The calls of one measurement
are independent, as the goal defines them: MLX may run them side by side on
the GPU, and side-by-side calls over the same K/V share the L2 cache. The
`chained` column measures the same calls with each query taken from the
previous call's output, so that they run one after another (as a model's
layers do); it is reported beside the goal and does not change it. Where
torch can trace the GPU's clock (pagecheck.gpu.clock), one more evaluation
of the independent calls is traced: the kernels' summed time per call
(busy), the time at least one ran (occupied) and the most kernels that ran
at once show whether a variant's calls ran side by side. Variants:

- paged:      impl.paged_attention on the pages (validation, the op, its
              kernels), the same block table and context lengths every call
- paged[op]:  ext.paged_attention alone (no Python validation)
- mlx_sdpa:   mx.fast.scaled_dot_product_attention on K/V gathered into
              dense [B, H_kv, S, D] beforehand
- launcher[splits=N] (only with --pin-splits N,...): the same kernels run
              by the Python launcher (pagecheck.gpu.kernels) with the decode
              split count pinned to N, to compare plans; no goal applies
- paged[distinct K/V], mlx_sdpa[distinct K/V] (only with --distinct-kv):
              the same calls, each on other K/V than its neighbours (the
              calls rotate over input sets covering three times the L2
              cache, as a model's layers read other K/V), so side-by-side
              calls share nothing through L2; shown beside the goal, which
              stays on the issue's measure (the same K/V every call)

Shapes: the issue's five (B, context) pairs, H_q 32, H_kv 8, D 128, bfloat16,
pages of 128 in a shuffled order. A program, not a test:

    python -m pagecheck.gpu.percall [--json PATH] [--calls 60] [--repeats 7] [--shapes 16x16384]
                                    [--pin-splits 1,2] [--distinct-kv]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

import mlx.core as mx

from pagecheck import ext
from pagecheck.impl.attention import paged_attention
from pagecheck.impl.page_gather import gather_pages_dense
from pagecheck.gpu import clock as gpu_clock
from pagecheck.gpu import kernels as gpu_kernels
from pagecheck.gpu import program as gpu_program
from pagecheck.gpu.profile import parse_shapes, split_counts
from pagecheck.gpu.bench import InputSet, kv_bytes_of, set_count
from pagecheck.gpu.goals import PERCALL_SHAPES
from pagecheck.arg_types import positive_int

NUM_Q_HEADS = 32
NUM_KV_HEADS = 8
HEAD_DIM = 128
PAGE_SIZE = 128
SHAPES = PERCALL_SHAPES
DEFAULT_CALLS = 60
DEFAULT_REPEATS = 7
WARMUP_ROUNDS = 2
# The goal: impl.paged_attention's wall per call at most this multiple of MLX SDPA's.
GOAL_RATIO = 1.0
PAGED = "paged"
BASELINE = "mlx_sdpa"
DISTINCT = "[distinct K/V]"  # suffix of the --distinct-kv rows


@dataclass
class PerCallRow:
    batch: int
    context: int
    variant: str
    wall_us: float  # median over repeats of (build + evaluate) / calls
    build_us: float  # median over repeats of the build half, per call
    eval_us: float  # median over repeats of the evaluate half, per call
    best_wall_us: float  # the fastest repeat
    chained_us: float  # median over repeats of the wall per call when each call takes the previous output
    # From one traced evaluation of the independent calls, where the GPU's clock can be read (else None):
    # kernel time per call summed over kernels, the time per call at least one kernel ran, and the most
    # kernels that ran at once (above 1: calls or their kernels ran side by side).
    gpu_busy_us: float | None = None
    gpu_occupied_us: float | None = None
    most_at_once: int | None = None




def make_inputs(batch: int, context: int, seed: int = 0) -> InputSet:
    """Random bfloat16 pages in a shuffled page order, and the same K/V gathered densely."""
    pages_per_row = context // PAGE_SIZE
    num_pages = batch * pages_per_row
    k1, k2, k3, k4 = mx.random.split(mx.random.key(seed), 4)
    shape = (num_pages, NUM_KV_HEADS, PAGE_SIZE, HEAD_DIM)
    key_pages = mx.random.normal(shape, key=k1).astype(mx.bfloat16)
    value_pages = mx.random.normal(shape, key=k2).astype(mx.bfloat16)
    table = mx.random.permutation(num_pages, key=k3).astype(mx.int32).reshape(batch, pages_per_row)
    query = mx.random.normal((batch, NUM_Q_HEADS, 1, HEAD_DIM), key=k4).astype(mx.bfloat16)
    lens = mx.full((batch,), context, dtype=mx.int32)
    dense_k, dense_v = gather_pages_dense(key_pages, table), gather_pages_dense(value_pages, table)
    mx.eval(query, key_pages, value_pages, table, lens, dense_k, dense_v)
    return InputSet(query, key_pages, value_pages, table, lens, dense_k, dense_v)


def variants(inputs: InputSet, pinned_splits: tuple[int, ...] = ()) -> dict[str, Callable[[mx.array], mx.array]]:
    """Each variant as a function of the query [B, H_q, 1, D]; its output has the query's shape and dtype.
    `pinned_splits` adds the launcher with each split count pinned (GPU only)."""
    scale = HEAD_DIM**-0.5
    s = inputs
    pinned = {
        f"launcher[splits={splits}]": lambda q, splits=splits: gpu_kernels.paged_attention(
            q, s.key_pages, s.value_pages, s.block_table, s.context_lens, PAGE_SIZE, scale=scale, splits=splits)
        for splits in pinned_splits
    }
    return pinned | {
        PAGED: lambda q: paged_attention(q, s.key_pages, s.value_pages, s.block_table, s.context_lens, PAGE_SIZE,
                                         scale=scale),
        "paged[op]": lambda q: ext.paged_attention(q, s.key_pages, s.value_pages, s.block_table, s.context_lens,
                                                   PAGE_SIZE, scale, False),
        BASELINE: lambda q: mx.fast.scaled_dot_product_attention(q, s.dense_k, s.dense_v, scale=scale),
    }


def rotating(calls: list[Callable[[mx.array], mx.array]]) -> Callable[[mx.array], mx.array]:
    """One call after another of `calls`, in turn: consecutive calls read other input sets."""
    turn = itertools.count()
    return lambda q: calls[next(turn) % len(calls)](q)


def distinct_kv_variants(first: InputSet, batch: int, context: int) -> dict[str, Callable[[mx.array], mx.array]]:
    """paged and MLX SDPA rotating over `first` and further sets of the same shape, enough to cover three
    times the L2 cache (pagecheck.gpu.bench.set_count)."""
    sets = [first] + [make_inputs(batch, context, seed) for seed in range(1, set_count(kv_bytes_of(batch, context)))]
    per_set = [variants(s) for s in sets]
    return {name + DISTINCT: rotating([calls[name] for calls in per_set]) for name in (PAGED, BASELINE)}


def time_back_to_back(
    call: Callable[[mx.array], mx.array], query: mx.array, calls: int, chained: bool = False
) -> tuple[float, float]:
    """(build seconds, evaluate seconds) of `calls` calls evaluated by one mx.eval.

    Every call takes `query`, or with `chained` the previous call's output (the first takes `query`).
    """
    mx.synchronize()
    start = time.perf_counter()
    outs = []
    for _ in range(calls):
        outs.append(call(outs[-1] if chained and outs else query))
    built = time.perf_counter()
    mx.eval(outs)
    mx.synchronize()
    return built - start, time.perf_counter() - built


def trace_back_to_back(call: Callable[[mx.array], mx.array], query: mx.array, calls: int) -> dict[str, Any]:
    """One evaluation of `calls` independent calls on the GPU's clock: busy and occupied us per call, and the
    most kernels that ran at once."""
    events = gpu_clock.kernel_events(lambda: time_back_to_back(call, query, calls))
    summary = gpu_clock.summarize(events, calls)
    return {"gpu_busy_us": summary["busy_us"], "gpu_occupied_us": summary["occupied_us"],
            "most_at_once": gpu_clock.most_at_once(events) if events else None}  # fmt: skip


def measure(
    batch: int, context: int, calls: int, repeats: int, trace: bool = False, pinned_splits: tuple[int, ...] = (),
    distinct_kv: bool = False,
) -> list[PerCallRow]:
    """One row per variant; the variants take turns in every repeat, so drift hits them alike. With `trace`,
    each variant's independent calls are also traced once on the GPU's clock (trace_back_to_back); with
    `distinct_kv`, paged and MLX SDPA also run rotating over input sets (distinct_kv_variants)."""
    inputs = make_inputs(batch, context)
    calls_of = variants(inputs, pinned_splits)
    if distinct_kv:
        calls_of |= distinct_kv_variants(inputs, batch, context)
    for _ in range(WARMUP_ROUNDS):
        for call in calls_of.values():
            time_back_to_back(call, inputs.query, calls)
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in calls_of}
    chained: dict[str, list[float]] = {name: [] for name in calls_of}
    for _ in range(repeats):
        for name, call in calls_of.items():
            samples[name].append(time_back_to_back(call, inputs.query, calls))
            chained[name].append(sum(time_back_to_back(call, inputs.query, calls, chained=True)))
    rows = []
    for name, found in samples.items():
        walls = [build + evaluate for build, evaluate in found]
        rows.append(PerCallRow(
            batch, context, name,
            wall_us=statistics.median(walls) / calls * 1e6,
            build_us=statistics.median(build for build, _ in found) / calls * 1e6,
            eval_us=statistics.median(evaluate for _, evaluate in found) / calls * 1e6,
            best_wall_us=min(walls) / calls * 1e6,
            chained_us=statistics.median(chained[name]) / calls * 1e6,
            **(trace_back_to_back(calls_of[name], inputs.query, calls) if trace else {}),
        ))  # fmt: skip
    return rows


def judge(rows: list[dict[str, Any]], device: str = "gpu") -> list[dict[str, Any]]:
    """Per shape: paged's wall per call over MLX SDPA's, and whether it meets GOAL_RATIO (on the GPU only: a CPU
    run's ratio is shown, not judged)."""
    by_shape: dict[tuple[int, int], dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_shape.setdefault((row["batch"], row["context"]), {})[row["variant"]] = row
    verdicts = []
    for (batch, context), found in sorted(by_shape.items()):
        paged, sdpa = found.get(PAGED), found.get(BASELINE)
        ratio = None if paged is None or sdpa is None else paged["wall_us"] / sdpa["wall_us"]
        verdicts.append({
            "goal": f"wall per call <= {GOAL_RATIO:.1f}x MLX SDPA", "batch": batch, "context": context,
            "paged_us": paged and paged["wall_us"], "sdpa_us": sdpa and sdpa["wall_us"], "ratio": ratio,
            "met": None if ratio is None or device != "gpu" else ratio <= GOAL_RATIO,
        })  # fmt: skip
    return verdicts


def render(document: dict[str, Any]) -> str:
    lines = [
        f"## Wall per call, {document['calls']} back-to-back calls, one mx.eval (median of "
        f"{document['repeats']} repeats)",
        "",
        "| B | context | variant | wall us | build us | eval us | best us | chained us "
        "| GPU busy / occupied us | most at once |",
        "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]

    def number(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    for r in document["rows"]:
        gpu = "-" if r.get("gpu_busy_us") is None else f"{number(r['gpu_busy_us'])} / {number(r['gpu_occupied_us'])}"
        at_once = "-" if r.get("most_at_once") is None else str(r["most_at_once"])
        lines.append(f"| {r['batch']} | {r['context']} | {r['variant']} | {r['wall_us']:.1f} | {r['build_us']:.1f} | "
                     f"{r['eval_us']:.1f} | {r['best_wall_us']:.1f} | {number(r.get('chained_us'))} | {gpu} | "
                     f"{at_once} |")
    lines += ["", "| B | context | paged us | MLX SDPA us | ratio | goal |", "| ---: | ---: | ---: | ---: | ---: | --- |"]
    for v in document["goals"]:
        ratio = "-" if v["ratio"] is None else f"{v['ratio']:.2f}"
        met = {True: "met", False: "missed", None: "not measured"}[v["met"]]
        if document.get("device") == "cpu":
            met = "not judged (CPU)"
        paged = "-" if v["paged_us"] is None else f"{v['paged_us']:.1f}"
        sdpa = "-" if v["sdpa_us"] is None else f"{v['sdpa_us']:.1f}"
        lines.append(f"| {v['batch']} | {v['context']} | {paged} | {sdpa} | {ratio} | {met} |")
    distinct = {(r["batch"], r["context"], r["variant"]): r["wall_us"] for r in document["rows"]
                if r["variant"].endswith(DISTINCT)}
    if distinct:
        lines += ["", "Each call on other K/V than its neighbours (--distinct-kv; beside the goal, not judged):", "",
                  "| B | context | paged us | MLX SDPA us | ratio |", "| ---: | ---: | ---: | ---: | ---: |"]
        for batch, context in dict.fromkeys((b, c) for b, c, _ in distinct):
            paged_us = distinct[batch, context, PAGED + DISTINCT]
            sdpa_us = distinct[batch, context, BASELINE + DISTINCT]
            lines.append(f"| {batch} | {context} | {paged_us:.1f} | {sdpa_us:.1f} | {paged_us / sdpa_us:.2f} |")
    return "\n".join(lines) + "\n"


def run_percall(
    shapes: tuple[tuple[int, int], ...], calls: int, repeats: int, trace: bool = False,
    pinned_splits: tuple[int, ...] = (), distinct_kv: bool = False,
) -> dict[str, Any]:
    rows: list[PerCallRow] = []
    for batch, context in shapes:
        rows += measure(batch, context, calls, repeats, trace, pinned_splits, distinct_kv)
        mx.clear_cache()
    device = "gpu" if mx.default_device() == mx.gpu else "cpu"
    document = {"device": device, "calls": calls, "repeats": repeats, "rows": [asdict(r) for r in rows]}
    document["goals"] = judge(document["rows"], device)
    return document


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="also write the table's numbers here")
    parser.add_argument("--markdown", default=None, help="also write the printed table here")
    parser.add_argument("--calls", type=positive_int, default=DEFAULT_CALLS,
                        help=f"independent calls per timed evaluation (default {DEFAULT_CALLS})")
    parser.add_argument("--repeats", type=positive_int, default=DEFAULT_REPEATS,
                        help=f"timed evaluations per variant and shape; the median is kept (default {DEFAULT_REPEATS})")
    parser.add_argument("--shapes", type=lambda text: tuple(parse_shapes(text)), default=SHAPES,
                        help="B x context pairs, comma-separated (default: the issue's five)")
    parser.add_argument("--pin-splits", type=split_counts("pin-splits"), default=(),
                        help="also time the Python launcher with each of these decode split counts (GPU only)")
    parser.add_argument("--distinct-kv", action="store_true",
                        help="also time paged and MLX SDPA with each call on other K/V than its neighbours, so that "
                             "side-by-side calls share nothing through L2 (shown beside the goal, not judged)")
    parser.add_argument("--cpu", action="store_true", help="run on the CPU (host costs only; no goal applies)")
    args = parser.parse_args(argv)
    if args.cpu and args.pin_splits:
        parser.error("--pin-splits launches CUDA kernels: it needs the GPU, not --cpu")
    if args.cpu:
        mx.set_default_device(mx.cpu)
    else:
        why_not = gpu_program.cannot_run()
        if why_not:
            print(why_not)
            return gpu_program.CANNOT_RUN
    document = run_percall(args.shapes, args.calls, args.repeats, trace=not args.cpu and gpu_clock.available(),
                           pinned_splits=args.pin_splits, distinct_kv=args.distinct_kv)
    markdown = render(document)
    print(markdown)
    gpu_program.write_json(args.json, document)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
