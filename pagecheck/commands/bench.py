"""`pagecheck bench`: the operator benchmark alone, written as bench.md, bench.json and bench.svg."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from pagecheck.bench import BenchConfig
from pagecheck.bench_report import FULL_CONFIG, QUICK_CONFIG, run_bench_report
from pagecheck.commands import options
from pagecheck.device import DeviceUnavailable, use_device
from pagecheck.exit_codes import ExitCode
from pagecheck.progress import StageProgress
from pagecheck.render.bench import PLOT_FILE, render_bench, render_plot
from pagecheck.report_document import write_json
from pagecheck.report_index import write_index

NAME = "bench"
# The benchmark always measures this project's extension.
BENCH_SUBJECT = "impl"


def _contexts(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"contexts={text!r} must be comma-separated integers") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"contexts={text!r} must be positive")
    return values


def quick_bench_text() -> str:
    return (
        f"contexts {','.join(map(str, QUICK_CONFIG.contexts))}, {QUICK_CONFIG.repeats} process per point, "
        f"{QUICK_CONFIG.iterations} timed calls"
    )


def add_bench_options(parser: argparse.ArgumentParser) -> None:
    """--contexts and --repeats, shared by `bench` and `report`."""
    parser.add_argument(
        "--contexts",
        type=_contexts,
        default=None,
        metavar="N,N,...",
        help=f"benchmark: context lengths to time (default: {','.join(map(str, FULL_CONFIG.contexts))}, "
        "or the --quick ones)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        metavar="N",
        help=f"benchmark: fresh processes per variant and context (default: {FULL_CONFIG.repeats}, or {QUICK_CONFIG.repeats} with --quick)",
    )


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = options.add_command_parser(
        subparsers,
        NAME,
        "time direct paged attention against gather + dense and MLX SDPA",
        "Benchmark this project's extension in the Qwen3-4B decode shape: direct paged attention,\n"
        "gather + dense attention (gather timed) and MLX SDPA on pre-gathered K/V, each in fresh\n"
        "processes, at several contexts. Writes bench.md, bench.json (the keys of\n"
        "`python -m pagecheck.bench`, plus speedups and a correctness verdict) and bench.svg.",
    )
    options.add_device_option(parser)
    options.add_out_option(parser)
    options.add_quick_option(parser, quick_bench_text())
    options.add_seed_option(parser)
    add_bench_options(parser)
    return parser


def bench_config(args: argparse.Namespace) -> BenchConfig:
    config = QUICK_CONFIG if args.quick else FULL_CONFIG
    config = replace(config, device=args.device, seed=args.seed)
    if getattr(args, "contexts", None):
        config = replace(config, contexts=args.contexts)
    if getattr(args, "repeats", None):
        config = replace(config, repeats=args.repeats)
    return config


def run_bench_stage(args: argparse.Namespace, out: Path, progress: StageProgress) -> ExitCode:
    config = bench_config(args)
    processes = config.repeats * len(config.variants)
    progress.begin(
        f"{len(config.variants)} variants at {len(config.contexts)} contexts, {processes} fresh processes per context"
    )
    document = options.start_document("bench", args, subject=BENCH_SUBJECT)
    document.update(run_bench_report(config, lambda done, total, context: progress.update(done, total, f"contexts (last: {context})")))
    document["plot"] = PLOT_FILE
    write_json(out / "bench.json", document)
    (out / PLOT_FILE).write_text(render_plot(document))
    (out / "bench.md").write_text(render_bench(document))
    paged = document["medians_us"].get("paged", {})
    longest = str(config.contexts[-1])
    speed = document["speedups"][longest]["paged_vs_dense_gather"]
    progress.finish(
        f"paged {paged.get(longest) or float('nan'):.0f} µs at context {longest}"
        + (f", {speed:.1f}x faster than dense + gather" if speed else "")
    )
    return ExitCode.OK if document["correct"] else ExitCode.BENCH_INCORRECT


def run(args: argparse.Namespace) -> int:
    try:
        use_device(args.device)
    except DeviceUnavailable as exc:
        print(f"pagecheck {NAME}: {exc}")
        return ExitCode.DEVICE_UNAVAILABLE
    args.subject = BENCH_SUBJECT  # names the default output directory
    out = options.report_dir(args)
    code = run_bench_stage(args, out, StageProgress(NAME, 1, 1))
    write_index(out)
    print(f"pagecheck {NAME}: wrote {out / 'bench.md'}")
    return code
