"""`pagecheck bench`: the operator benchmark alone, written as bench.md, bench.json and bench.svg."""

from __future__ import annotations

import argparse
import sys
import importlib.util
from dataclasses import replace
from pathlib import Path
from typing import Any

import mlx.core as mx

from pagecheck.bench.attention import (
    DEFAULT_PROCESS_TIMEOUT_S,
    MAX_BENCH_CONTEXT,
    MAX_PROCESS_TIMEOUT_S,
    MAX_REPEATS,
    RESULT_SOURCE,
    BenchConfig,
    variants_for,
)
from pagecheck.bench.compare import compare_runs
from pagecheck.bench.partial import PartialRun
from pagecheck.bench.stage import FULL_CONFIG, QUICK_CONFIG, run_bench_report
from pagecheck.gpu import bench as bench_gpu
from pagecheck.arg_types import int_in, int_list, number_up_to
from pagecheck.commands import options
from pagecheck.commands.subject_setup import SubjectSetupError, prepare_subject
from pagecheck.exit_codes import ExitCode
from pagecheck.gpu.goals import evaluate_goals
from pagecheck.progress import StageProgress
from pagecheck.reports.render.bench import PLOT_FILE, render_bench, render_plot
from pagecheck.reports.render.bench_compare import COMPARE_PLOT_FILE, comparison_text, render_comparison_plot
from pagecheck.reports.render.bench_gpu import render_bench_gpu
from pagecheck.reports.document import read_json, write_json
from pagecheck.reports.index import write_index
from pagecheck.invariants.check_timeout import MIN_CHECK_TIMEOUT_S
from pagecheck.invariants.subject import absolute_spec

NAME = "bench"
# The GPU kernel benchmark always measures this project's extension.
BENCH_SUBJECT = "impl"


class CompareFileError(ValueError):
    """--compare names no readable benchmark result."""


def quick_bench_text() -> str:
    return (
        f"contexts {','.join(map(str, QUICK_CONFIG.contexts))}, {QUICK_CONFIG.repeats} "
        f"process{'es' if QUICK_CONFIG.repeats > 1 else ''} per point, "
        f"{QUICK_CONFIG.iterations} timed calls"
    )


def add_bench_options(parser: argparse.ArgumentParser) -> None:
    """--contexts, --repeats, --process-timeout and --compare, shared by `bench` and `report`."""
    parser.add_argument(
        "--contexts",
        type=int_list("contexts", most=MAX_BENCH_CONTEXT, a_set=True),
        default=None,
        metavar="N,N,...",
        help=f"benchmark: context lengths to time (default: {','.join(map(str, FULL_CONFIG.contexts))}, "
        "or the --quick ones)",
    )
    parser.add_argument(
        "--repeats",
        type=int_in(1, MAX_REPEATS),
        default=None,
        metavar="N",
        help=f"benchmark: fresh processes per variant and context, at most {MAX_REPEATS} (default: "
        f"{FULL_CONFIG.repeats}, or {QUICK_CONFIG.repeats} with --quick)",
    )
    parser.add_argument(
        "--process-timeout",
        type=number_up_to(MAX_PROCESS_TIMEOUT_S, least=MIN_CHECK_TIMEOUT_S),
        default=DEFAULT_PROCESS_TIMEOUT_S,
        metavar="S",
        help="benchmark: end a measuring process still running after S seconds (a subject that never returns); "
        "its variant and context is an error (default: %(default)g)",
    )
    parser.add_argument(
        "--compare",
        type=Path,
        default=None,
        metavar="PREVIOUS/bench.json",
        help="benchmark: compare with an earlier run's bench.json: print and plot the ratio of medians per "
        "variant and context, and flag changes beyond the noise (the two runs' interquartile ranges do not "
        "overlap; see pagecheck/bench/compare.py)",
    )


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = options.add_command_parser(
        subparsers,
        NAME,
        "time the subject's paged attention against gather + dense and MLX SDPA",
        "Benchmark the subject's paged_attention in the Qwen3-4B decode shape against this project's\n"
        "implementation (the reference row, unless the subject is impl), gather + dense attention\n"
        "(gather timed) and MLX SDPA on pre-gathered K/V, each in fresh processes, at several\n"
        "contexts, with each variant's output checked against the float64 reference (a wrong subject\n"
        "is timed and marked). Writes bench.md, bench.json (the keys of `python -m pagecheck.bench.attention`,\n"
        "plus speedups and a correctness verdict) and bench.svg (medians with their spread over\n"
        "processes). --compare adds the ratio to an earlier run (bench_compare.svg).\n\n"
        "With --device gpu on a CUDA machine it then times the GPU kernels themselves\n"
        "(bench_gpu.md, bench_gpu.json): decode at B 1, 16, 64 x contexts 128..16384 and one\n"
        "prefill (--quick: the goal shapes), kernel-only and per call, against gather + MLX SDPA,\n"
        "MLX SDPA and, when PyTorch is installed, cuDNN SDPA on dense K/V, with the speed goals\n"
        "judged from the numbers (pagecheck/gpu/goals.py).",
    )
    options.add_subject_option(parser)
    options.add_device_option(parser)
    options.add_out_option(parser)
    options.add_quick_option(parser, quick_bench_text())
    options.add_seed_option(parser)
    add_bench_options(parser)
    return parser


def bench_config(args: argparse.Namespace) -> BenchConfig:
    config = QUICK_CONFIG if args.quick else FULL_CONFIG
    config = replace(
        config, device=args.device, seed=args.seed, subject=absolute_spec(args.subject), variants=variants_for(args.subject)
    )
    if getattr(args, "contexts", None):
        config = replace(config, contexts=args.contexts)
    if getattr(args, "repeats", None):
        config = replace(config, repeats=args.repeats)
    return replace(config, process_timeout_s=getattr(args, "process_timeout", DEFAULT_PROCESS_TIMEOUT_S))


def read_previous(args: argparse.Namespace) -> dict | None:
    """The --compare file's result, read before anything is measured; None without --compare."""
    path = getattr(args, "compare", None)
    if path is None:
        return None
    try:
        previous = read_json(path)
    except (OSError, ValueError) as exc:  # ValueError: not JSON, or not UTF-8
        reason = getattr(exc, "strerror", None) or exc
        raise CompareFileError(f"--compare {path}: cannot read a benchmark result: {reason}") from exc
    if not isinstance(previous, dict) or previous.get("source") != RESULT_SOURCE or "samples" not in previous:
        raise CompareFileError(f"--compare {path}: not a bench.json written by pagecheck bench or pagecheck report")
    if not _samples_well_formed(previous["samples"]) or not isinstance(previous.get("configuration", {}), dict):
        raise CompareFileError(
            f"--compare {path}: its samples are not {{variant: {{context: [[microseconds, ...] per process]}}}}"
        )
    return previous


# A timing in microseconds that a call could take: from a nanosecond to a day. Ratios of any two stay finite
# (a timing of 1e-320 made the comparison's ratio infinite, and its plot failed after the run was measured).
TIMING_RANGE_US = (1e-3, 86_400e6)


def _samples_well_formed(samples: Any) -> bool:
    """True for bench.json's samples: variant -> context -> one list of timings per process, each in
    TIMING_RANGE_US."""
    least, most = TIMING_RANGE_US

    def timings(process: Any) -> bool:
        return isinstance(process, list) and bool(process) and all(
            isinstance(t, (int, float)) and not isinstance(t, bool) and least <= t <= most for t in process
        )

    return isinstance(samples, dict) and all(
        isinstance(by_context, dict) and all(
            isinstance(processes, list) and all(timings(p) for p in processes) for processes in by_context.values()
        )
        for by_context in samples.values()
    )


def run_bench_stage(
    args: argparse.Namespace, out: Path, progress: StageProgress, previous: dict | None = None
) -> ExitCode:
    config = bench_config(args)
    processes = config.repeats * len(config.variants)
    progress.begin(
        f"subject {args.subject} and {len(config.variants) - 1} other variants at {len(config.contexts)} contexts, "
        f"{processes} fresh processes per context"
    )
    document = options.start_document("bench", args)
    interrupted: PartialRun | None = None
    try:
        document.update(run_bench_report(
            config, lambda done, total, context: progress.update(done, total, f"contexts (last: {context})")
        ))
    except PartialRun as exc:
        interrupted = exc
        # What finished is kept, and it does not pass: not every context was measured.
        document.update(exc.partial, correct=False, interrupted=exc.record)
        config = replace(config, contexts=config.contexts[: exc.finished])
    document["plot"] = PLOT_FILE
    if previous is not None:
        document["comparison"] = compare_runs(document, previous, args.compare)
        # No point measured in both runs (other contexts, say) leaves nothing to plot; the tables say so.
        document["comparison"]["plot"] = COMPARE_PLOT_FILE if document["comparison"]["rows"] else None
        if document["comparison"]["rows"]:
            (out / COMPARE_PLOT_FILE).write_text(render_comparison_plot(document))
    write_json(out / "bench.json", document)
    (out / PLOT_FILE).write_text(render_plot(document))
    (out / "bench.md").write_text(render_bench(document))
    measured = document["medians_us"].get("subject", {})
    longest = str(config.contexts[-1])
    speed = document["speedups"][longest].get("vs_dense_gather")
    if interrupted is not None:
        progress.finish(f"{interrupted}; bench.md keeps the contexts that finished")
    elif measured.get(longest) is None:
        error = document["errors"].get("subject", {}).get(longest) or "no run finished"
        progress.finish(f"subject not measured at context {longest}: {error[:160]} (bench.md has every error)")
    else:
        progress.finish(
            f"subject {measured[longest]:.0f} µs at context {longest}"
            + ("" if document["subject_correct"] else " (WRONG output)")
            + (f", {speed:.1f}x faster than dense + gather" if speed and document["subject_correct"] else "")
        )
    if previous is not None:
        print(comparison_text(document))
    if interrupted is not None:
        raise KeyboardInterrupt
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
        previous = read_previous(args)
        prepare_subject(args, needs=("paged_attention",))
    except CompareFileError as exc:
        print(f"pagecheck {NAME}: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    except SubjectSetupError as exc:
        print(f"pagecheck {NAME}: {exc}", file=sys.stderr)
        return exc.code
    out = options.report_dir(args)
    kernels = cuda_kernels_available(args.device)
    try:
        code = run_bench_stage(args, out, StageProgress(NAME, 1, 2 if kernels else 1), previous)
    except KeyboardInterrupt:
        if (out / "bench.json").exists():  # the contexts that finished, marked INCOMPLETE
            write_index(out, ("bench",))
        raise
    if kernels:
        run_gpu_bench_stage(args, out, StageProgress(NAME, 2, 2))
    elif args.device == "gpu":
        print(f"pagecheck {NAME}: the GPU kernel benchmark (bench_gpu.md) needs MLX's CUDA back-end; skipped")
    write_index(out)
    print(f"pagecheck {NAME}: wrote {out / 'bench.md'}" + (f" and {out / 'bench_gpu.md'}" if kernels else ""))
    return code
