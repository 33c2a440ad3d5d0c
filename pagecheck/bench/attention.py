"""Decode-attention benchmark: a subject's paged attention against gather + dense and MLX's SDPA.

A program, not a test: `python -m pagecheck.bench.attention` prints a table and writes
JSON. Every sample is a fresh process running one variant at one context
(warm-up calls, then synchronized timed calls), so allocator and cache state
never carry over between variants; the order of variants alternates between
repeats. A variant's figure is the median over processes of each process's
median; its spread is the interquartile range and the range of those
per-process medians, with the fastest and slowest single call beside them.

Variants (Qwen3-4B decode shape by default), all on the same layouts:
- subject: the subject's paged_attention (loaded in the child by its spec),
  called with the layout's keyword arguments, as the tolerance sweep calls it.
- impl: this project's impl.paged_attention called the same way; the
  reference row, left out when the subject is impl itself.
- dense_gather: gather the pages into dense K/V (timed), then ext.dense_attention.
- mlx_sdpa: mx.fast.scaled_dot_product_attention on K/V gathered beforehand (not timed).

The first process of each variant and context also compares one output with
the float64 reference under reference.tolerance's table, so every time
carries a correctness mark; a variant that is wrong is still timed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from pagecheck.arg_types import int_in, int_list, path_arg
from pagecheck.python_child import module_command

VARIANTS = ("subject", "impl", "dense_gather", "mlx_sdpa")
DEVICES = ("cpu", "gpu")
# The spec of this project's implementation: its row is the reference row.
IMPL_SPEC = "impl"
RESULT_SOURCE = "pagecheck.bench"  # the "source" of every result this program writes
# The longest context timed: its K and V (batch 1, 8 KV heads, D 128, bfloat16) take 1 GiB, its float64 check 4.
MAX_BENCH_CONTEXT = 1 << 18
# Fresh processes per point, and calls per process: past these a run is a mistake that would run for days.
MAX_REPEATS = 1000
MAX_CALLS = 1_000_000


def variants_for(subject: str) -> tuple[str, ...]:
    """Every variant, less the impl row when the subject is impl (it would time the same function twice)."""
    return tuple(v for v in VARIANTS if not (v == "impl" and subject.strip() == IMPL_SPEC))


DEFAULT_PROCESS_TIMEOUT_S = 1800.0  # a full bench process on this project's CPU runs for seconds
MAX_PROCESS_TIMEOUT_S = 1_000_000.0


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
    variants: tuple[str, ...] = field(default=variants_for(IMPL_SPEC))
    # A subject spec that resolves in any working directory (pagecheck.invariants.subject.absolute_spec).
    subject: str = IMPL_SPEC
    # A measuring process still running after this many seconds is ended; its variant and context is an error.
    process_timeout_s: float = DEFAULT_PROCESS_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.device not in DEVICES:
            raise ValueError(f"device={self.device!r} is not one of {DEVICES}")
        unknown = set(self.variants) - set(VARIANTS)
        if unknown:
            raise ValueError(f"variants {sorted(unknown)} are not among {VARIANTS}")
        for name in ("repeats", "iterations"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be at least 1")
        if not 0 < self.process_timeout_s <= MAX_PROCESS_TIMEOUT_S:
            raise ValueError(f"process_timeout_s={self.process_timeout_s:g} must be above 0 and at most "
                             f"{MAX_PROCESS_TIMEOUT_S:g}")  # fmt: skip
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
    """A zero-argument call that returns the variant's output for these inputs (lazy for MLX)."""
    import mlx.core as mx

    from pagecheck.impl.page_gather import gather_pages_dense

    query, key_pages, value_pages = inputs["query"], inputs["key_pages"], inputs["value_pages"]
    table, lens = inputs["block_table"], inputs["context_lens"]
    scale = config.head_dim**-0.5
    if variant in ("subject", "impl"):
        from pagecheck.invariants.calls import call_attention
        from pagecheck.invariants.subject import load_subject

        attention = load_subject(config.subject if variant == "subject" else IMPL_SPEC).get("paged_attention")
        return lambda: call_attention(attention, inputs)
    from pagecheck import ext

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


def materialize(output: Any) -> Any:
    """Finish computing an output: MLX arrays are lazy, anything else (NumPy) is already done."""
    import mlx.core as mx

    if isinstance(output, mx.array):
        mx.eval(output)
    return output


def check_output(output: Any, layout: Any, config: BenchConfig) -> dict[str, Any]:
    """One output against the float64 reference, judged by reference.tolerance's table."""
    from pagecheck.bench.tolerance_sweep import allowance_used
    from pagecheck.reference.arrays import to_numpy
    from pagecheck.reference.tolerance import compare

    want = layout.reference_output(scale=config.head_dim**-0.5)
    try:
        got = to_numpy(output, np.float64)
        comparison = compare(got, want, config.dtype)
    except Exception as error:  # a wrong shape or type is a wrong output, not a failed measurement
        return {
            "passed": False, "allowance_used": None, "max_abs_error": None, "num_mismatches": None,
            "num_nonfinite": None, "error": f"{type(error).__name__}: {error}",
        }  # fmt: skip
    return {
        "passed": comparison.passed,
        "allowance_used": allowance_used(got, want, config.dtype),
        "max_abs_error": comparison.max_abs_error,
        "num_mismatches": comparison.num_mismatches,
        "num_nonfinite": comparison.num_nonfinite,
        "error": None,
    }


def time_variant(variant: str, context: int, config: BenchConfig, *, check: bool = False) -> dict[str, Any]:
    """{"samples": per-call microseconds after warm-up, "check": the output's correctness or None}."""
    import mlx.core as mx

    mx.set_default_device(mx.gpu if config.device == "gpu" else mx.cpu)
    layout = build_layout(config, context)
    inputs = layout.as_mx()
    mx.eval([value for value in inputs.values() if isinstance(value, mx.array)])
    if variant not in ("subject", "impl"):
        del inputs["mask"]
    call = variant_call(variant, inputs, config)
    verdict = check_output(materialize(call()), layout, config) if check else None
    for _ in range(config.warmup):
        materialize(call())
    samples = []
    for _ in range(config.iterations):
        start = time.perf_counter()
        materialize(call())
        samples.append((time.perf_counter() - start) * 1e6)
    return {"samples": samples, "check": verdict}


def run_child(variant: str, context: int, config: BenchConfig, *, check: bool = False) -> dict[str, Any]:
    """time_variant in a fresh interpreter; returns time_variant's result or {"error": "..."}.

    The child runs in this process's working directory, with it last on its
    path (python_child), so a module subject resolves there as it does here. It writes its outcome
    to a file of its own, not to stdout, where a subject may print anything;
    a child that ends without writing it (a crash, a subject's os._exit) is
    an error entry naming its exit status, and so is one still running after
    config.process_timeout_s (ended with SIGKILL).
    """
    with tempfile.TemporaryDirectory(prefix="pagecheck-bench-") as scratch:
        result = Path(scratch) / "outcome.json"
        request = json.dumps({"variant": variant, "context": context, "config": asdict(config), "check": check,
                              "result": str(result)})
        try:
            done = subprocess.run(module_command("pagecheck.bench.attention", "--child", request),
                                  capture_output=True, text=True, timeout=config.process_timeout_s)  # fmt: skip
        except subprocess.TimeoutExpired:
            return {"error": f"the measuring process ran past --process-timeout {config.process_timeout_s:g} s "
                             "and was ended"}  # fmt: skip
        try:
            return json.loads(result.read_text())
        except (OSError, ValueError):
            pass
    said = (done.stderr.strip().splitlines() or [""])[-1][:400]
    return {"error": f"the measuring process ended with exit status {done.returncode} without a result"
                     + (f": {said}" if said else "")}


def child_main(request_text: str) -> int:
    request = json.loads(request_text)
    config = config_from_dict(request["config"])
    try:
        outcome = time_variant(request["variant"], int(request["context"]), config, check=bool(request["check"]))
    except BaseException as error:  # reported by the parent next to the variant; a subject's sys.exit included
        outcome = {"error": f"{type(error).__name__}: {error}"}
    Path(request["result"]).write_text(json.dumps(outcome))
    return 0


def config_from_dict(values: dict[str, Any]) -> BenchConfig:
    values = dict(values)
    values["contexts"] = tuple(values["contexts"])
    values["variants"] = tuple(values["variants"])
    return BenchConfig(**values)


def process_spread(processes: list[list[float]]) -> dict[str, float | int] | None:
    """Median, quartiles and range of the per-process medians; None when no process measured.

    Quartiles are statistics.quantiles' inclusive method (linear between
    order statistics), so with one process every figure is that process's median.
    """
    if not processes:
        return None
    medians = sorted(statistics.median(p) for p in processes)
    if len(medians) > 1:
        q1, _, q3 = statistics.quantiles(medians, n=4, method="inclusive")
    else:
        q1 = q3 = medians[0]
    return {
        "median": statistics.median(medians),
        "q1": q1,
        "q3": q3,
        "iqr": q3 - q1,
        "min": medians[0],
        "max": medians[-1],
        "processes": len(medians),
    }


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


def run_bench(config: BenchConfig, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Run every (variant, context) in `config.repeats` fresh processes and summarize; `progress(done, total)`
    after each process."""
    import mlx.core as mx

    from pagecheck import ext

    if config.device == "gpu" and not mx.is_available(mx.gpu):
        raise ValueError("device='gpu' is not available in this MLX build; install mlx[cuda13] or use --device cpu")

    per_process: dict[str, dict[str, list[list[float]]]] = {v: {str(c): [] for c in config.contexts} for v in config.variants}
    checks: dict[str, dict[str, dict[str, Any]]] = {v: {} for v in config.variants}
    errors: dict[str, dict[str, str]] = {}
    done = 0
    for repeat_idx in range(config.repeats):
        order = config.variants if repeat_idx % 2 == 0 else tuple(reversed(config.variants))
        for context in config.contexts:
            for variant in order:
                key = str(context)
                # A variant's output is checked in its first process that ran, at each context.
                outcome = run_child(variant, context, config, check=key not in checks[variant])
                if progress is not None:
                    done += 1
                    progress(done, config.repeats * len(config.contexts) * len(config.variants))
                if "error" in outcome:
                    errors.setdefault(variant, {})[key] = outcome["error"]
                    continue
                per_process[variant][key].append(outcome["samples"])
                if outcome["check"] is not None:
                    checks[variant][key] = outcome["check"]

    spread: dict[str, dict[str, dict[str, float | int] | None]] = {}
    medians: dict[str, dict[str, float | None]] = {}
    minimums: dict[str, dict[str, float | None]] = {}
    maximums: dict[str, dict[str, float | None]] = {}
    for variant, by_context in per_process.items():
        spread[variant], medians[variant], minimums[variant], maximums[variant] = {}, {}, {}, {}
        for context, processes in by_context.items():
            spread[variant][context] = process_spread(processes)
            if not processes:
                medians[variant][context] = minimums[variant][context] = maximums[variant][context] = None
                continue
            medians[variant][context] = statistics.median(statistics.median(p) for p in processes)
            minimums[variant][context] = min(min(p) for p in processes)
            maximums[variant][context] = max(max(p) for p in processes)
    return {
        "source": RESULT_SOURCE,
        "host": host_info(),
        "configuration": asdict(config),
        "build": ext.build_info(),
        "correctness": checks,
        "samples": per_process,
        "medians_us": medians,
        "spread_us": spread,
        "min_us": minimums,
        "max_us": maximums,
        "errors": errors,
    }


def correctness_mark(check: dict[str, Any] | None) -> str:
    """"ok 0.12" (allowance used), "WRONG 3.4", "WRONG (error)" or "-" when not checked."""
    if check is None:
        return "-"
    if check["error"] is not None:
        return f"WRONG ({check['error']})"
    return f"{'ok' if check['passed'] else 'WRONG'} {check['allowance_used']:.3g}"


def format_table(result: dict[str, Any]) -> str:
    """One row per (context, variant): median, quartiles, process range, time relative to the subject, correctness."""
    from tabulate import tabulate

    config = result["configuration"]
    rows = []
    for context in (str(c) for c in config["contexts"]):
        subject_median = result["medians_us"].get("subject", {}).get(context)
        for variant in config["variants"]:
            spread = result["spread_us"][variant][context]
            rows.append([
                context,
                variant,
                "-" if spread is None else f"{spread['median']:.1f}",
                "-" if spread is None else f"{spread['q1']:.1f}..{spread['q3']:.1f}",
                "-" if spread is None else f"{spread['min']:.1f}..{spread['max']:.1f}",
                "-" if spread is None or not subject_median else f"{spread['median'] / subject_median:.2f}x",
                correctness_mark(result["correctness"].get(variant, {}).get(context)),
            ])
    header = ["context", "variant", "median us", "IQR us", "process range us", "time / subject", "correct (allowance used)"]
    build = result["build"]
    title = (
        f"subject {config['subject']}; B={config['batch']} H_q={config['num_q_heads']} H_kv={config['num_kv_heads']} "
        f"L={config['num_queries']} D={config['head_dim']} {config['dtype']} page={config['page_size']} "
        f"device={config['device']}; {config['repeats']} processes x {config['iterations']} calls; "
        f"build -march={build['march']}, {build['num_threads']} threads"
    )
    lines = [title, tabulate(rows, headers=header, tablefmt="github")]
    for variant, by_context in result["errors"].items():
        for context, message in by_context.items():
            lines.append(f"{variant} at {context}: {message}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m pagecheck.bench.attention", description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int_list("contexts", most=MAX_BENCH_CONTEXT, a_set=True), default=BenchConfig.contexts,
                        metavar="N,N,...", help="comma-separated context lengths (default: 128,1024,4096)")
    parser.add_argument("--repeats", type=int_in(1, MAX_REPEATS), default=BenchConfig.repeats, metavar="N",
                        help=f"fresh processes per variant and context, at most {MAX_REPEATS} (default: %(default)s)")
    parser.add_argument("--iterations", type=int_in(1, MAX_CALLS), default=BenchConfig.iterations, metavar="N",
                        help=f"timed calls per process, at most {MAX_CALLS} (default: %(default)s)")
    parser.add_argument("--warmup", type=int_in(0, MAX_CALLS), default=BenchConfig.warmup, metavar="N",
                        help=f"untimed calls per process, at most {MAX_CALLS} (default: %(default)s)")
    parser.add_argument("--device", choices=DEVICES, default=BenchConfig.device, help="(default: %(default)s)")
    parser.add_argument("--subject", default=IMPL_SPEC,
                        help="the subject whose paged_attention is timed (default: %(default)s)")
    parser.add_argument("--out", type=path_arg, default=Path("reports/bench/bench.json"),
                        help="where to write the JSON result: a new file, or one this program wrote before, which "
                        "is replaced (default: %(default)s)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is None:
        problem = _out_problem(args.out)
        if problem:
            parser.error(f"--out={str(args.out)!r} {problem}")
    return args


def _out_problem(out: Path) -> str | None:
    """Why the result may not be written to `out` (checked before the run), None if it may: an existing path is
    replaced only when it is an earlier result of this program."""
    if not out.exists():
        return None
    if not out.is_file():
        return "exists and is not a file"
    try:
        earlier = json.loads(out.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        earlier = None
    if not (isinstance(earlier, dict) and earlier.get("source") == RESULT_SOURCE):
        return "exists and is not an earlier result of this program; name a new file"
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child is not None:
        return child_main(args.child)
    from pagecheck.invariants.subject import SubjectError, absolute_spec, load_subject

    # Loaded here first, so that a subject that does not load costs no measuring.
    try:
        subject = load_subject(args.subject)
    except SubjectError as error:
        print(f"pagecheck.bench: {error}", file=sys.stderr)
        return 3
    if not subject.has("paged_attention"):
        print(f"pagecheck.bench: subject {args.subject!r} has no paged_attention", file=sys.stderr)
        return 3
    config = BenchConfig(
        contexts=args.contexts, repeats=args.repeats, iterations=args.iterations, warmup=args.warmup, device=args.device,
        subject=absolute_spec(args.subject), variants=variants_for(args.subject),
    )
    try:
        result = run_bench(config, progress=lambda done, total: print(
            f"pagecheck.bench: {done}/{total} measuring processes", file=sys.stderr, flush=True))
    except ValueError as error:
        print(f"pagecheck.bench: {error}", file=sys.stderr)
        return 2
    print(format_table(result))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    partial = args.out.with_name(args.out.name + ".partial")
    partial.write_text(json.dumps(result, indent=2))
    os.replace(partial, args.out)
    print(f"wrote {args.out}")
    # Exit 5, as `pagecheck bench`, when a variant did not run (bench.json lists why).
    return 5 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
