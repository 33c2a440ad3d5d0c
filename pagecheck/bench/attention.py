"""Decode-attention benchmark: direct paged attention against gather + dense and MLX's SDPA.

A program, not a test: `python -m pagecheck.bench` prints a table and writes
JSON. Every sample is a fresh process running one variant at one context
(warm-up calls, then synchronized timed calls), so allocator and cache state
never carry over between variants; the order of variants alternates between
repeats. A variant's figure is the median over processes of each process's
median, with the smallest and largest per-call time beside it.

Variants (Qwen3-4B decode shape by default):
- paged: ext.paged_attention reading the pages through the block table.
- dense_gather: gather the pages into dense K/V (timed), then ext.dense_attention.
- mlx_sdpa: mx.fast.scaled_dot_product_attention on K/V gathered beforehand (not timed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from pagecheck.arg_types import int_list

VARIANTS = ("dense_gather", "paged", "mlx_sdpa")
DEVICES = ("cpu", "gpu")
REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class BenchConfig:
    contexts: tuple[int, ...] = (128, 1024, 4096)
    repeats: int = 5
    warmup: int = 10
    iterations: int = 50
    device: str = "cpu"
    batch: int = 1
    num_q_heads: int = 32
    num_kv_heads: int = 8
    num_queries: int = 1
    head_dim: int = 128
    dtype: str = "bfloat16"
    page_size: int = 128
    spare_pages: int = 2
    seed: int = 0
    variants: tuple[str, ...] = field(default=VARIANTS)

    def __post_init__(self) -> None:
        if self.device not in DEVICES:
            raise ValueError(f"device={self.device!r} is not one of {DEVICES}")
        unknown = set(self.variants) - set(VARIANTS)
        if unknown:
            raise ValueError(f"variants {sorted(unknown)} are not among {VARIANTS}")
        for name in ("repeats", "iterations"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be at least 1")
        if not self.contexts or min(self.contexts) < self.num_queries:
            raise ValueError(f"contexts={self.contexts} must be non-empty and each at least num_queries={self.num_queries}")


def build_layout(config: BenchConfig, context: int) -> Any:
    """The benchmark's inputs: every request at `context`, pages shuffled, spare pages poisoned."""
    from pagecheck.reference.layouts import random_layout

    rng = np.random.default_rng([config.seed, context])
    return random_layout(
        rng,
        context_lens=[context] * config.batch,
        page_size=config.page_size,
        num_queries=config.num_queries,
        num_q_heads=config.num_q_heads,
        num_kv_heads=config.num_kv_heads,
        head_dim=config.head_dim,
        dtype=config.dtype,
        spare_pages=config.spare_pages,
        extra_columns=0,
    )


def variant_call(variant: str, inputs: dict[str, Any], config: BenchConfig) -> Callable[[], Any]:
    """A zero-argument call that returns the variant's (lazy) output for these inputs."""
    import mlx.core as mx

    from pagecheck import ext
    from pagecheck.impl.page_gather import gather_pages_dense

    query, key_pages, value_pages = inputs["query"], inputs["key_pages"], inputs["value_pages"]
    table, lens, page_size = inputs["block_table"], inputs["context_lens"], inputs["page_size"]
    scale = config.head_dim**-0.5
    if variant == "paged":
        return lambda: ext.paged_attention(query, key_pages, value_pages, table, lens, page_size, scale, False)
    if variant == "dense_gather":
        return lambda: ext.dense_attention(
            query, gather_pages_dense(key_pages, table), gather_pages_dense(value_pages, table), scale, False, lens
        )
    if variant == "mlx_sdpa":
        # Every request has the same context, so the gathered K/V hold no padding.
        context = int(np.array(lens).max())
        keys = gather_pages_dense(key_pages, table)[:, :, :context]
        values = gather_pages_dense(value_pages, table)[:, :, :context]
        mx.eval(keys, values)
        return lambda: mx.fast.scaled_dot_product_attention(query, keys, values, scale=scale)
    raise ValueError(f"variant={variant!r} is not one of {VARIANTS}")


def time_variant(variant: str, context: int, config: BenchConfig) -> list[float]:
    """Per-call times in microseconds, measured in this process after warm-up."""
    import mlx.core as mx

    mx.set_default_device(mx.gpu if config.device == "gpu" else mx.cpu)
    inputs = build_layout(config, context).as_mx()
    del inputs["mask"]
    mx.eval([value for value in inputs.values() if isinstance(value, mx.array)])
    call = variant_call(variant, inputs, config)
    for _ in range(config.warmup):
        mx.eval(call())
    samples = []
    for _ in range(config.iterations):
        start = time.perf_counter()
        mx.eval(call())
        samples.append((time.perf_counter() - start) * 1e6)
    return samples


def run_child(variant: str, context: int, config: BenchConfig) -> dict[str, Any]:
    """time_variant in a fresh interpreter; returns {"samples": [...]} or {"error": "..."}."""
    request = json.dumps({"variant": variant, "context": context, "config": asdict(config)})
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-m", "pagecheck.bench.attention", "--child", request],
        capture_output=True, text=True, env=env, cwd=REPO_ROOT,
    )
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["exit code %d" % done.returncode])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def child_main(request_text: str) -> int:
    request = json.loads(request_text)
    config = config_from_dict(request["config"])
    try:
        samples = time_variant(request["variant"], int(request["context"]), config)
    except Exception as error:  # reported by the parent next to the variant
        print(json.dumps({"error": f"{type(error).__name__}: {error}"}))
        return 0
    print(json.dumps({"samples": samples}))
    return 0


def config_from_dict(values: dict[str, Any]) -> BenchConfig:
    values = dict(values)
    values["contexts"] = tuple(values["contexts"])
    values["variants"] = tuple(values["variants"])
    return BenchConfig(**values)


def measure_correctness(config: BenchConfig) -> dict[str, dict[str, float | str]]:
    """Max abs error of each variant against the float64 reference on the benchmark's inputs."""
    import mlx.core as mx

    from pagecheck.reference.arrays import to_numpy

    mx.set_default_device(mx.gpu if config.device == "gpu" else mx.cpu)
    errors: dict[str, dict[str, float | str]] = {}
    for context in config.contexts:
        layout = build_layout(config, context)
        want = layout.reference_output(scale=config.head_dim**-0.5)
        inputs = layout.as_mx()
        del inputs["mask"]
        row: dict[str, float | str] = {}
        for variant in config.variants:
            try:
                got = to_numpy(variant_call(variant, inputs, config)(), np.float64)
                row[variant] = float(np.abs(got - want).max())
            except Exception as error:
                row[variant] = f"{type(error).__name__}: {error}"
        errors[str(context)] = row
    return errors


def host_info() -> dict[str, Any]:
    import mlx.core as mx

    from pagecheck.environment import cpu_model

    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "mlx": mx.__version__,
    }


def run_bench(config: BenchConfig) -> dict[str, Any]:
    """Run every (variant, context) in `config.repeats` fresh processes and summarize."""
    import mlx.core as mx

    from pagecheck import ext

    if config.device == "gpu" and not mx.is_available(mx.gpu):
        raise ValueError("device='gpu' is not available in this MLX build; install mlx[cuda13] or use --device cpu")

    per_process: dict[str, dict[str, list[list[float]]]] = {v: {str(c): [] for c in config.contexts} for v in config.variants}
    errors: dict[str, dict[str, str]] = {}
    for repeat_idx in range(config.repeats):
        order = config.variants if repeat_idx % 2 == 0 else tuple(reversed(config.variants))
        for context in config.contexts:
            for variant in order:
                outcome = run_child(variant, context, config)
                if "error" in outcome:
                    errors.setdefault(variant, {})[str(context)] = outcome["error"]
                    continue
                per_process[variant][str(context)].append(outcome["samples"])

    medians: dict[str, dict[str, float | None]] = {}
    minimums: dict[str, dict[str, float | None]] = {}
    maximums: dict[str, dict[str, float | None]] = {}
    for variant, by_context in per_process.items():
        medians[variant], minimums[variant], maximums[variant] = {}, {}, {}
        for context, processes in by_context.items():
            if not processes:
                medians[variant][context] = minimums[variant][context] = maximums[variant][context] = None
                continue
            medians[variant][context] = statistics.median(statistics.median(p) for p in processes)
            minimums[variant][context] = min(min(p) for p in processes)
            maximums[variant][context] = max(max(p) for p in processes)
    return {
        "source": "pagecheck.bench",
        "host": host_info(),
        "configuration": asdict(config),
        "build": ext.build_info(),
        "correctness": {"max_abs_error_vs_float64": measure_correctness(config)},
        "samples": per_process,
        "medians_us": medians,
        "min_us": minimums,
        "max_us": maximums,
        "errors": errors,
    }


def format_table(result: dict[str, Any]) -> str:
    """One row per (context, variant): median, min, max, speed relative to paged, max abs error."""
    from tabulate import tabulate

    config = result["configuration"]
    errors = result["correctness"]["max_abs_error_vs_float64"]
    rows = []
    for context in (str(c) for c in config["contexts"]):
        paged_median = result["medians_us"].get("paged", {}).get(context)
        for variant in config["variants"]:
            median = result["medians_us"][variant][context]
            error = errors.get(context, {}).get(variant)
            rows.append([
                context,
                variant,
                "-" if median is None else f"{median:.1f}",
                "-" if median is None else f"{result['min_us'][variant][context]:.1f}",
                "-" if median is None else f"{result['max_us'][variant][context]:.1f}",
                "-" if median is None or not paged_median else f"{median / paged_median:.2f}x",
                error if isinstance(error, str) else f"{error:.2e}",
            ])
    header = ["context", "variant", "median us", "min us", "max us", "time / paged", "max abs err"]
    build = result["build"]
    title = (
        f"B={config['batch']} H_q={config['num_q_heads']} H_kv={config['num_kv_heads']} L={config['num_queries']} "
        f"D={config['head_dim']} {config['dtype']} page={config['page_size']} device={config['device']}; "
        f"{config['repeats']} processes x {config['iterations']} calls; build -march={build['march']}, "
        f"{build['num_threads']} threads"
    )
    lines = [title, tabulate(rows, headers=header, tablefmt="github")]
    for variant, by_context in result["errors"].items():
        for context, message in by_context.items():
            lines.append(f"{variant} at {context}: {message}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m pagecheck.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int_list("contexts"), default=BenchConfig.contexts,
                        help="comma-separated context lengths (default 128,1024,4096)")
    parser.add_argument("--repeats", type=int, default=BenchConfig.repeats, help="fresh processes per variant and context")
    parser.add_argument("--iterations", type=int, default=BenchConfig.iterations, help="timed calls per process")
    parser.add_argument("--warmup", type=int, default=BenchConfig.warmup, help="untimed calls per process")
    parser.add_argument("--device", choices=DEVICES, default=BenchConfig.device)
    parser.add_argument("--out", type=Path, default=Path("reports/bench/bench.json"), help="where to write the JSON result")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child is not None:
        return child_main(args.child)
    config = BenchConfig(
        contexts=args.contexts, repeats=args.repeats, iterations=args.iterations, warmup=args.warmup, device=args.device
    )
    try:
        result = run_bench(config)
    except ValueError as error:
        print(f"pagecheck.bench: {error}", file=sys.stderr)
        return 2
    print(format_table(result))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
