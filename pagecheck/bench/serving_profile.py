"""Where a serving decode step's time goes: building its graph on the host, then evaluating it.

Fills `--batch` decode slots with requests of `--context` tokens (one prefill
chunk each), then times `--steps` decode steps of the Qwen3 model the way the
scheduler runs them (tokens and offsets in, greedy token out, read back to
the host). Per step it reports the host's graph-building time and the time
from there to the sampled tokens on the host (submit and GPU work), medians
over the steps, and a cProfile of one step's graph building. A program for
finding what to fix, not a benchmark of record (serve-bench is that):

    python -m pagecheck.bench.serving_profile [--model qwen3-0.6b] [--batch 8] [--context 2048] [--variant paged]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time

import mlx.core as mx

from pagecheck.bench.graph import graph_primitives
from pagecheck.serving.kv_traffic import KvTraffic
from pagecheck.serving.model_config import QWEN3_CONFIGS, model_config
from pagecheck.serving.qwen3 import Qwen3Model
from pagecheck.serving.qwen3_attention import ATTENTION_PATHS
from pagecheck.serving.qwen3_weights import random_qwen3_weights
from pagecheck.serving.serving_kv import DEFAULT_PAGE_SIZE, serving_kv_for

WARMUP_STEPS = 3
PROFILE_ROWS = 25


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(QWEN3_CONFIGS), default="qwen3-0.6b")
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--context", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--page-size", type=int, default=DEFAULT_PAGE_SIZE)
    parser.add_argument("--prefill-chunk", type=int, default=512)
    parser.add_argument("--variant", choices=ATTENTION_PATHS, default="paged")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--cpu", action="store_true")
    args = parser.parse_args(argv)
    if args.cpu:
        mx.set_default_device(mx.cpu)
    config = model_config(args.model, args.layers)
    dtype = getattr(mx, args.dtype)
    model = Qwen3Model(random_qwen3_weights(config, seed=0, dtype=dtype), args.variant)
    kv = serving_kv_for(args.variant, config.num_layers, args.batch,
                        2 * config.num_kv_heads * config.head_dim * dtype.size, args.page_size)
    traffic = KvTraffic()
    began = time.perf_counter()
    for slot in range(args.batch):
        caches = kv.open_request(slot, args.context + WARMUP_STEPS + args.steps + 2)
        for first in range(0, args.context, args.prefill_chunk):
            length = min(args.prefill_chunk, args.context - first)
            mx.eval(model(mx.full((1, length), 1 + slot, dtype=mx.int32), first, caches, traffic))
        kv.admit_to_decode(slot, slot)
        print(f"prefilled slot {slot} at {time.perf_counter() - began:.1f} s", flush=True)

    position = args.context

    def build() -> mx.array:
        nonlocal position
        if kv.table is not None:
            kv.table.start_step()
        tokens = mx.array([[1 + slot] for slot in range(args.batch)], dtype=mx.int32)
        offsets = mx.array([position] * args.batch, dtype=mx.int32)
        position += 1
        hidden = model(tokens, offsets, kv.decode_caches, traffic)
        return mx.argmax(model.logits(hidden[:, -1]), axis=-1)

    for warmup in range(WARMUP_STEPS):
        build().tolist()
        print(f"warm-up step {warmup} at {time.perf_counter() - began:.1f} s", flush=True)
    builds, submits, waits = [], [], []
    for _ in range(args.steps):
        start = time.perf_counter()
        sampled = build()
        built = time.perf_counter()
        mx.async_eval(sampled)
        submitted = time.perf_counter()
        sampled.tolist()
        builds.append(built - start)
        submits.append(submitted - built)
        waits.append(time.perf_counter() - submitted)
    print(f"{config.name} ({config.num_layers} layers), {args.variant}, batch {args.batch}, context {args.context}, "
          f"page {args.page_size}, {args.dtype}, device {mx.default_device()}")
    spans = list(zip(builds, submits, waits))
    print(f"decode step: build {statistics.median(builds) * 1e3:.2f} ms, submit {statistics.median(submits) * 1e3:.2f} ms, "
          f"wait {statistics.median(waits) * 1e3:.2f} ms, total {statistics.median(map(sum, spans)) * 1e3:.2f} ms "
          f"(medians of {args.steps})")
    print("per step, build + submit + wait ms: " + ", ".join("+".join(f"{t * 1e3:.1f}" for t in s) for s in spans))
    sampled = build()
    counts = graph_primitives(sampled)
    sampled.tolist()
    total = sum(counts.values())
    print(f"graph of one decode step: {total} nodes, {total / config.num_layers:.1f} per layer: "
          + ", ".join(f"{name} {count}" for name, count in counts.most_common()))
    profiler = cProfile.Profile()
    profiler.enable()
    sampled = build()
    profiler.disable()
    sampled.tolist()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(PROFILE_ROWS)
    print(text.getvalue())
    kv.close_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
