"""`pagecheck report`: invariants suite, tolerance sweep and operator benchmark, written as one report."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from pagecheck.invariants.catalog import INVARIANTS
from pagecheck.commands import options
from pagecheck.commands.bench import (
    DEFAULT_PROCESS_TIMEOUT_S,
    CompareFileError,
    add_bench_options,
    cuda_kernels_available,
    quick_bench_text,
    read_previous,
    run_bench_stage,
    run_gpu_bench_stage,
)
from pagecheck.commands.subject_setup import SubjectSetupError, prepare_subject
from pagecheck.commands.tolerance import run_tolerance_stage
from pagecheck.reports.conformance import conformance_body
from pagecheck.exit_codes import ExitCode, most_serious
from pagecheck.progress import StageProgress
from pagecheck.reports.render.conformance import render_conformance
from pagecheck.reports.document import write_json
from pagecheck.reports.index import write_index
from pagecheck.invariants.results import load_results
from pagecheck.invariants.runner import SuiteRequest, run_suite
from pagecheck.bench.tolerance_sweep import FULL_GRID, QUICK_GRID

NAME = "report"
# gpu_kernels runs only with --device gpu on a CUDA machine (the GPU kernel benchmark).
STAGES = ("invariants", "tolerance", "bench", "gpu_kernels")
# The Hypothesis profile (invariants/profiles.py) of the suite for each report profile.
SUITE_PROFILE = {"full": "thorough", "quick": "default"}


def _course_part(totals: dict) -> str:
    """How many of the broken invariants break a course clause, when some break only checks beyond it."""
    if totals["invariants_failed"] and totals["course_clauses_failed"] < totals["invariants_failed"]:
        return f" ({totals['course_clauses_failed']} of them in a course clause, the rest only beyond the course)"
    return ""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = options.add_command_parser(
        subparsers,
        NAME,
        "check, measure and benchmark a subject; write a full report",
        "Run the invariants suite on the subject (in parallel, in child processes), the tolerance sweep\n"
        "and the operator benchmark, then write conformance, tolerance and bench reports (Markdown +\n"
        "JSON, plus an SVG plot) and an index.md that sums them up. With --device gpu on a CUDA\n"
        "machine, also the GPU kernel benchmark with its speed goals (bench_gpu.md). The exit status\n"
        "names the most serious finding: a broken invariant exits 1, a crashed suite 8.\n\n"
        "index.md and conformance.md start with where to look first: the broken invariant most likely\n"
        "to be the cause (reports/start_here.py ranks them), its first failing check, its\n"
        "counterexample and a command that reruns that check from any directory; or, when the suite\n"
        "crashed, the cause from its log.",
    )
    options.add_subject_option(parser)
    options.add_device_option(parser)
    options.add_out_option(parser)
    options.add_quick_option(
        parser, f"the invariants' {SUITE_PROFILE['quick']} Hypothesis profile instead of {SUITE_PROFILE['full']}; "
        f"{len(list(QUICK_GRID.cells()))} tolerance cells instead of {len(list(FULL_GRID.cells()))}; benchmark {quick_bench_text()}"
    )
    options.add_seed_option(parser)
    options.add_jobs_option(parser)
    parser.add_argument(
        "--invariant",
        action="append",
        default=[],
        choices=sorted(INVARIANTS),
        metavar="ID",
        help="run only this invariant's checks; repeat it for several (default: every invariant). "
        "IDs: " + ", ".join(INVARIANTS),
    )
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=STAGES,
        metavar="STAGE",
        help=f"leave a stage out (repeatable); STAGE is one of {', '.join(STAGES)}. The index covers the rest",
    )
    options.add_check_timeout_option(parser, "an invariants check or a tolerance cell that runs")
    add_bench_options(parser)
    return parser


def run_conformance_stage(args: argparse.Namespace, out: Path, progress: StageProgress) -> ExitCode:
    selected = tuple(args.invariant)
    progress.begin(
        f"{'selected' if selected else 'all'} invariants on {args.subject}, "
        f"{args.jobs or 'no'} worker processes; pytest output in {out / 'invariants.log'}"
    )

    def show(counts: dict[str, int], percent: int | None) -> None:
        done = sum(counts.values())
        detail = f"checks done: {counts['passed']} passed, {counts['failed']} failed, {counts['errors']} errors, {counts['skipped']} skipped"
        progress.update(done, None, detail + (f", {percent}%" if percent is not None else ""))

    with tempfile.TemporaryDirectory(prefix="pagecheck-") as scratch:
        results_path = Path(scratch) / "results.json"
        request = SuiteRequest(
            subject=args.subject,
            device=args.device,
            seed=args.seed,
            profile=SUITE_PROFILE[options.profile_name(args)],
            jobs=args.jobs,
            results_path=results_path,
            invariants=selected,
            check_timeout_s=args.check_timeout,
        )
        run = run_suite(request, out / "invariants.log", show)
        results = load_results(results_path) if results_path.exists() else None
    document = _write_conformance(args, out, conformance_body(run, results, selected, request))
    totals = document["totals"]
    crash = document["suite"]["crash"]
    if crash is not None:
        progress.finish(f"CRASHED: {crash['what']}")
        return ExitCode.SUITE_CRASHED
    progress.finish(
        f"{totals['invariants_held']} invariants hold, {totals['invariants_failed']} broken"
        f"{_course_part(totals)}, {totals['invariants_unchecked']} unchecked ({totals['pass']} of "
        f"{totals['checks']} checks passed)"
    )
    if document["suite"]["problem"]:
        return ExitCode.SUITE_ERROR
    return ExitCode.INVARIANT_FAILED if document["broken_invariants"] else ExitCode.OK


def _write_conformance(args: argparse.Namespace, out: Path, body: dict[str, Any]) -> dict[str, Any]:
    document = options.start_document("conformance", args)
    document.update(body)
    write_json(out / "conformance.json", document)
    (out / "conformance.md").write_text(render_conformance(document))
    return document


def chosen_stages(skip: list[str], device: str) -> list[str]:
    """The stages a report runs: all but the skipped ones, gpu_kernels only where CUDA runs it."""
    return [
        name for name in STAGES if name not in skip and (name != "gpu_kernels" or cuda_kernels_available(device))
    ]


def run(args: argparse.Namespace) -> int:
    chosen = chosen_stages(args.skip, args.device)
    if not chosen:
        print(f"pagecheck {NAME}: every stage was skipped; nothing to report", file=sys.stderr)
        return ExitCode.USAGE
    # The options each stage alone reads, where they were given: refused for a stage this run skips.
    given = {
        "bench": [f"--{name}" for name in ("contexts", "repeats", "compare") if getattr(args, name, None)]
        + ["--process-timeout"] * (args.process_timeout != DEFAULT_PROCESS_TIMEOUT_S),
        "invariants": ["--invariant"] * bool(args.invariant) + ["--jobs"] * (args.jobs != options.DEFAULT_JOBS),
    }
    for stage, unused in given.items():
        if unused and stage not in chosen:
            print(f"pagecheck {NAME}: {', '.join(unused)} set the {stage} stage, which this run skips", file=sys.stderr)
            return ExitCode.USAGE
    try:
        previous = read_previous(args) if "bench" in chosen else None
    except CompareFileError as exc:
        print(f"pagecheck {NAME}: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    try:
        subject = prepare_subject(args, needs=())
    except SubjectSetupError as exc:
        # Nothing was checked, so no report folder is made for it.
        print(f"pagecheck {NAME}: {exc}", file=sys.stderr)
        return exc.code
    if not subject.has("paged_attention"):
        skipped = [name for name in ("tolerance", "bench", "gpu_kernels") if name in chosen]
        chosen = [name for name in chosen if name not in skipped]
        if skipped:
            print(f"pagecheck {NAME}: subject {args.subject} has no paged_attention; skipping {', '.join(skipped)}")
        if not chosen:
            print(f"pagecheck {NAME}: nothing left to run: the stages this run keeps all need paged_attention",
                  file=sys.stderr)
            return ExitCode.SUBJECT_LOAD_FAILED
    missing = () if subject.has("paged_attention") else ("paged_attention",)
    out = options.report_dir(args)
    stages = {
        "invariants": lambda progress: run_conformance_stage(args, out, progress),
        "tolerance": lambda progress: run_tolerance_stage(subject, args, out, progress),
        "bench": lambda progress: run_bench_stage(args, out, progress, previous),
        "gpu_kernels": lambda progress: run_gpu_bench_stage(args, out, progress),
    }
    codes = []
    finished = 0
    try:
        for number, name in enumerate(chosen, start=1):
            if any(out.glob("*.json")):
                # Rewritten when the run ends; a process ended here (a subject's segfault inside the in-process
                # tolerance stage) leaves an index of what finished, with this stage and the rest unfinished.
                write_index(out, tuple(chosen[number - 1 :]), missing)
            codes.append(stages[name](StageProgress(name, number, len(chosen))))
            finished = number
    except KeyboardInterrupt:
        codes.append(ExitCode.INTERRUPTED)
        print(f"pagecheck {NAME}: interrupted during {chosen[finished]}")
    unfinished = tuple(chosen[finished:])
    index = write_index(out, unfinished, missing) if any(out.glob("*.json")) else None
    if missing:
        # Its pool and cache were checked, but no attention check ran: not a pass of the subject, whatever held.
        print(f"pagecheck {NAME}: subject {args.subject} has no paged_attention "
              f"({subject.missing.get('paged_attention', 'not defined')}): its pool and cache were checked, its "
              "attention was not")  # fmt: skip
        codes.append(ExitCode.SUBJECT_LOAD_FAILED)
    code = most_serious(codes)
    if index is None:
        print(f"pagecheck {NAME}: {code.name} (exit {int(code)}); no stage finished, so there is no index")
        return code
    print(f"pagecheck {NAME}: {code.name} (exit {int(code)}); summary in {index}")
    return code
