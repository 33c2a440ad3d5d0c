"""`pagecheck bench`: the operator benchmark alone, written as bench.md, bench.json and bench.svg."""

from __future__ import annotations

import argparse
import importlib.util
from dataclasses import replace
from pathlib import Path

import mlx.core as mx

from pagecheck.bench.attention import BenchConfig
from pagecheck.bench.stage import FULL_CONFIG, QUICK_CONFIG, run_bench_report
from pagecheck.gpu import bench as bench_gpu
from pagecheck.arg_types import int_list
from pagecheck.commands import options
from pagecheck.device import DeviceUnavailable, use_device
from pagecheck.exit_codes import ExitCode
from pagecheck.gpu.goals import evaluate_goals
from pagecheck.progress import StageProgress
from pagecheck.reports.render.bench import PLOT_FILE, render_bench, render_plot
from pagecheck.reports.render.bench_gpu import render_bench_gpu
from pagecheck.reports.document import write_json
from pagecheck.reports.index import write_index

NAME = "bench"
# The benchmark always measures this project's extension.
BENCH_SUBJECT = "impl"


def quick_bench_text() -> str:
    return (
        f"contexts {','.join(map(str, QUICK_CONFIG.contexts))}, {QUICK_CONFIG.repeats} process per point, "
        f"{QUICK_CONFIG.iterations} timed calls"
    )


def add_bench_options(parser: argparse.ArgumentParser) -> None:
    """--contexts and --repeats, shared by `bench` and `report`."""
    parser.add_argument(
        "--contexts",
        type=int_list("contexts"),
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
        "`python -m pagecheck.bench`, plus speedups and a correctness verdict) and bench.svg.\n\n"
        "With --device gpu on a CUDA machine it then times the GPU kernels themselves\n"
        "(bench_gpu.md, bench_gpu.json): decode at B 1, 16, 64 x contexts 128..16384 and one\n"
        "prefill (--quick: the goal shapes), kernel-only and per call, against gather + MLX SDPA,\n"
        "MLX SDPA and, when PyTorch is installed, cuDNN SDPA on dense K/V, with the speed goals\n"
        "judged from the numbers (pagecheck/gpu_goals.py).",
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


def cuda_kernels_available(device: str) -> bool:
    """The GPU kernel benchmark drives the CUDA kernels; on Metal or the CPU it does not run."""
    return device == "gpu" and mx.cuda.is_available()


def run_gpu_bench_stage(args: argparse.Namespace, out: Path, progress: StageProgress) -> ExitCode:
    shapes = bench_gpu.bench_shapes(quick=args.quick)
    use_torch = importlib.util.find_spec("torch") is not None
    extension_paged_attention, _ = bench_gpu.extension_paged_attention()
    progress.begin(
        f"{len(shapes)} shapes; cuDNN rows {'on' if use_torch else 'off (PyTorch is not installed)'}"
        + ("" if extension_paged_attention else "; the extension did not import, its rows are left out")
    )
    document = options.start_document("bench_gpu", args, subject=BENCH_SUBJECT)
    document.update(bench_gpu.run_gpu_bench(
        shapes, use_torch, extension_paged_attention,
        on_shape=lambda done, total, rows: progress.update(
            done, total, f"shapes (last: {rows[0].kind} B {rows[0].batch} x {rows[0].context})"),
    ))  # fmt: skip
    document["goals"] = evaluate_goals(document["rows"])
    write_json(out / "bench_gpu.json", document)
    (out / "bench_gpu.md").write_text(render_bench_gpu(document))
    met = [goal["met"] for goal in document["goals"]]
    progress.finish(f"{sum(m is True for m in met)} of {len(met)} speed goals met")
    return ExitCode.OK


def run(args: argparse.Namespace) -> int:
    try:
        use_device(args.device)
    except DeviceUnavailable as exc:
        print(f"pagecheck {NAME}: {exc}")
        return ExitCode.DEVICE_UNAVAILABLE
    args.subject = BENCH_SUBJECT  # names the default output directory
    out = options.report_dir(args)
    kernels = cuda_kernels_available(args.device)
    code = run_bench_stage(args, out, StageProgress(NAME, 1, 2 if kernels else 1))
    if kernels:
        run_gpu_bench_stage(args, out, StageProgress(NAME, 2, 2))
    elif args.device == "gpu":
        print(f"pagecheck {NAME}: the GPU kernel benchmark (bench_gpu.md) needs MLX's CUDA back-end; skipped")
    write_index(out)
    print(f"pagecheck {NAME}: wrote {out / 'bench.md'}" + (f" and {out / 'bench_gpu.md'}" if kernels else ""))
    return code
