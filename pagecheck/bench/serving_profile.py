"""Where a serving step's time goes: building its graph on the host, then evaluating it.

`--phase decode` (the default) fills `--batch` decode slots with requests of
`--context` tokens (prefilled in chunks of `--prefill-chunk`), then times
`--steps` decode steps of the Qwen3 model the way the scheduler runs them
(tokens and offsets in, greedy token out, read back to the host). With
`--active N` only the first N slots hold a request and the others stay empty,
as in most of serve-bench's steps (requests join and leave the batch).
`--phase prefill` times `--steps` prompt chunks of `--chunk` tokens of one
request whose first `--context` tokens are cached, the way serve-bench's
scheduler runs a chunk (the chunk's hidden states evaluated). Per step or
chunk it reports three host-clock spans, medians over the steps: building the
graph, MLX's submit (until `mx.async_eval` returns), and the wait for the
result; then the graph's primitives by kind and a cProfile of one graph
build. With `--overlap` each decode step is built and submitted while the
previous one is still on the device, and its wait is for that previous
step's tokens, as serve-bench's scheduler runs them: where MLX's submit
itself waits on work in flight, it shows here and not in the default mode.
A program for finding what to fix, not a benchmark of record (serve-bench
is that):

    python -m pagecheck.bench.serving_profile [--model qwen3-0.6b] [--batch 8] [--context 2048] [--variant paged]
        [--eager | --layer-halves] [--overlap] [--active N]
    python -m pagecheck.bench.serving_profile --phase prefill [--chunk 128] [--context 2048]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from collections.abc import Callable

import mlx.core as mx

from pagecheck.bench.graph import graph_primitives
from pagecheck.serving.batch import DEFAULT_PREFILL_STEP, MAX_BATCH_SIZE
from pagecheck.serving.kv_traffic import KvTraffic
from pagecheck.serving.model_config import QWEN3_CONFIGS, model_config
from pagecheck.serving.qwen3 import Qwen3Model
from pagecheck.serving.qwen3_attention import ATTENTION_PATHS
from pagecheck.serving.qwen3_weights import random_qwen3_weights
from pagecheck.serving.serving_kv import DEFAULT_PAGE_SIZE, serving_kv_for
from pagecheck.arg_types import int_in, positive_int

WARMUP_STEPS = 3
PROFILE_ROWS = 25
PHASES = ("decode", "prefill")


def time_steps(build: Callable[[], mx.array], steps: int, overlap: bool = False) -> list[tuple[float, float, float]]:
    """(build, submit, wait) seconds of each of `steps` calls of `build`, evaluated one by one; with `overlap`
    each call's wait is for the previous call's result (the first call's is 0), the last one's awaited after."""
    spans = []
    previous: mx.array | None = None
    for _ in range(steps):
        start = time.perf_counter()
        result = build()
        built = time.perf_counter()
        mx.async_eval(result)
        submitted = time.perf_counter()
        if overlap:
            if previous is not None:
                mx.eval(previous)
            previous = result
        else:
            mx.eval(result)
        spans.append((built - start, submitted - built, time.perf_counter() - submitted))
    if previous is not None:
        mx.eval(previous)
    return spans


def report(
    label: str, what: str, build: Callable[[], mx.array], steps: int, num_layers: int, overlap: bool = False
) -> None:
    """Times `steps` builds, then prints the spans, one build's graph by kind and a profile of another."""
    spans = time_steps(build, steps, overlap)
    builds, submits, waits = zip(*spans)
    mode = " (each overlapped with the previous one, whose result it waits for)" if overlap else ""
    print(f"{label}{mode}: build {statistics.median(builds) * 1e3:.2f} ms, submit {statistics.median(submits) * 1e3:.2f} ms, "
          f"wait {statistics.median(waits) * 1e3:.2f} ms, total {statistics.median(map(sum, spans)) * 1e3:.2f} ms "
          f"(medians of {steps})")
    print(f"per {what}, build + submit + wait ms: " + ", ".join("+".join(f"{t * 1e3:.1f}" for t in s) for s in spans))
    result = build()
    counts = graph_primitives(result)
    mx.eval(result)
    total = sum(counts.values())
    print(f"graph of one {label}: {total} nodes, {total / num_layers:.1f} per layer: "
          + ", ".join(f"{name} {count}" for name, count in counts.most_common()))
    profiler = cProfile.Profile()
    profiler.enable()
    result = build()
    profiler.disable()
    mx.eval(result)
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(PROFILE_ROWS)
    print(text.getvalue())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(QWEN3_CONFIGS), default="qwen3-0.6b", help="model shape (default qwen3-0.6b)")
    parser.add_argument("--layers", type=positive_int, default=None, help="layers of the model to run (default: all)")
    parser.add_argument("--batch", type=int_in(1, MAX_BATCH_SIZE), default=8,
                        help=f"requests per decode step, at most {MAX_BATCH_SIZE} (default 8)")
    parser.add_argument("--context", type=positive_int, default=2048,
                        help="tokens each request holds before the timed steps (default 2048)")
    parser.add_argument("--active", type=positive_int, default=None,
                        help="decode slots that hold a request, the first ones; the rest stay empty (default: all)")
    parser.add_argument("--steps", type=positive_int, default=20, help="timed steps (default 20)")
    parser.add_argument("--page-size", type=positive_int, default=DEFAULT_PAGE_SIZE,
                        help=f"tokens per KV page (default {DEFAULT_PAGE_SIZE})")
    parser.add_argument("--prefill-chunk", type=positive_int, default=512,
                        help="tokens per chunk when filling the context before the timed steps (default 512)")
    parser.add_argument("--variant", choices=ATTENTION_PATHS, default="paged", help="attention path (default paged)")
    parser.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), default="bfloat16",
                        help="weights' and KV dtype (default bfloat16)")
    parser.add_argument("--phase", choices=PHASES, default="decode",
                        help="decode: batched decode steps; prefill: prompt chunks of one request")
    parser.add_argument("--chunk", type=positive_int, default=DEFAULT_PREFILL_STEP,
                        help="tokens per timed prompt chunk with --phase prefill (default: serve-bench's prefill step)")
    parser.add_argument("--eager", action="store_true",
                        help="build decode steps op by op, without the model's compiled layer halves")
    parser.add_argument("--layer-halves", action="store_true",
                        help="build paged decode steps layer by layer (two compiled halves a layer) instead of "
                             "as one compiled step")
    parser.add_argument("--overlap", action="store_true",
                        help="submit each decode step while the previous one runs and wait for that one's tokens, "
                             "as serve-bench's scheduler does")
    parser.add_argument("--cpu", action="store_true", help="run on the CPU")
    args = parser.parse_args(argv)
    if args.overlap and args.phase != "decode":
        parser.error("--overlap applies to --phase decode (a prefill chunk is awaited before the next)")
    if args.active is not None and args.phase != "decode":
        parser.error("--active applies to --phase decode")
    if args.active is not None and args.active > args.batch:
        parser.error(f"--active {args.active} is more than --batch {args.batch}")
    active = args.batch if args.active is None else args.active
    if args.cpu:
        mx.set_default_device(mx.cpu)
    try:
        config = model_config(args.model, args.layers)
    except ValueError as exc:
        parser.error(str(exc))
    # The positions a request holds by the last timed step: the context, then the warm-up, timed, graph and
    # profile steps (prefill: chunks of --chunk tokens).
    held = args.context + (WARMUP_STEPS + args.steps + 2) * (args.chunk if args.phase == "prefill" else 1)
    if held > config.max_context:
        parser.error(f"--context {args.context} and --steps {args.steps} reach {held} positions, above "
                     f"{config.name}'s context of {config.max_context}")
    if args.page_size > config.max_context:
        parser.error(f"--page-size {args.page_size} is above {config.name}'s context of {config.max_context}")
    dtype = getattr(mx, args.dtype)
    # Random weights of a full-size model take minutes on a CPU: say what is being built, and where, first.
    print(f"building {config.name} ({config.num_layers} layers, {args.dtype}) with random weights on "
          f"{mx.default_device()}", flush=True)
    model = Qwen3Model(random_qwen3_weights(config, seed=0, dtype=dtype), args.variant, compile_decode=not args.eager,
                       whole_step=not args.layer_halves)
    kv = serving_kv_for(args.variant, config.num_layers, args.batch,
                        2 * config.num_kv_heads * config.head_dim * dtype.size, args.page_size)
    traffic = KvTraffic()
    began = time.perf_counter()

    def prefill(slot: int, max_context: int) -> list:
        caches = kv.open_request(slot, max_context)
        for first in range(0, args.context, args.prefill_chunk):
            length = min(args.prefill_chunk, args.context - first)
            mx.eval(model(mx.full((1, length), 1 + slot, dtype=mx.int32), first, caches, traffic))
        print(f"prefilled slot {slot} at {time.perf_counter() - began:.1f} s", flush=True)
        return caches

    position = args.context
    setting = (f"{config.name} ({config.num_layers} layers), {args.variant}, page {args.page_size}, {args.dtype}, "
               f"{'eager' if args.eager else 'compiled layer halves' if args.layer_halves else 'compiled'} decode")
    if args.phase == "prefill":
        # The warm-up chunks, the timed ones, and one each for the graph and the profile.
        chunks = WARMUP_STEPS + args.steps + 2
        caches = prefill(0, args.context + chunks * args.chunk)

        def build() -> mx.array:
            nonlocal position
            tokens = mx.full((1, args.chunk), 7, dtype=mx.int32)
            hidden = model(tokens, position, caches, traffic)
            position += args.chunk
            return hidden

        for _ in range(WARMUP_STEPS):
            mx.eval(build())
        print(f"{setting}, chunks of {args.chunk} after a context of {args.context}, device {mx.default_device()}")
        report("prefill chunk", "chunk", build, args.steps, config.num_layers)
    else:
        for slot in range(active):
            prefill(slot, args.context + WARMUP_STEPS + args.steps + 2)
            kv.admit_to_decode(slot, slot)

        def build() -> mx.array:
            nonlocal position
            if kv.table is not None:
                kv.table.start_step()
            # An empty slot feeds token 0 at offset 0, as the scheduler's does.
            tokens = mx.array([[1 + slot if slot < active else 0] for slot in range(args.batch)], dtype=mx.int32)
            offsets = mx.array([position if slot < active else 0 for slot in range(args.batch)], dtype=mx.int32)
            position += 1
            hidden = model(tokens, offsets, kv.decode_caches, traffic)
            return mx.argmax(model.logits(hidden[:, -1]), axis=-1)

        for warmup in range(WARMUP_STEPS):
            build().tolist()
            print(f"warm-up step {warmup} at {time.perf_counter() - began:.1f} s", flush=True)
        occupancy = "" if active == args.batch else f" ({active} slot{'s' if active > 1 else ''} active)"
        print(f"{setting}, batch {args.batch}{occupancy}, context {args.context}, device {mx.default_device()}")
        report("decode step", "step", build, args.steps, config.num_layers, args.overlap)
    kv.close_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
