"""`pagecheck tolerance`: the tolerance sweep alone, written as tolerance.md and tolerance.json."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pagecheck.commands import options
from pagecheck.commands.subject_setup import SubjectSetupError, prepare_subject
from pagecheck.exit_codes import ExitCode
from pagecheck.progress import StageProgress
from pagecheck.reports.render.tolerance import render_tolerance
from pagecheck.reports.render.tolerance_plot import PLOT_FILE, render_tolerance_plot
from pagecheck.reports.document import write_json
from pagecheck.reports.index import write_index
from pagecheck.invariants.subject import Subject
from pagecheck.bench.partial import PartialRun
from pagecheck.bench.tolerance_sweep import FULL_GRID, QUICK_GRID, SweepCell, run_sweep

NAME = "tolerance"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = options.add_command_parser(
        subparsers,
        NAME,
        "measure the subject's error against both oracles over a grid of shapes",
        "Run the subject's paged_attention over a grid of dtype x head dim x page size x query length x\n"
        "context, compare each output with the float64 reference and the mlx.core oracle, and write\n"
        "tolerance.md, tolerance.json (thresholds from reference/tolerance.py) and tolerance.svg (error as a\n"
        "fraction of the allowance against context, per dtype and path, one panel per oracle).",
    )
    options.add_subject_option(parser, sandbox=True)
    options.add_device_option(parser)
    options.add_out_option(parser)
    options.add_quick_option(parser, f"{len(list(QUICK_GRID.cells()))} cells instead of {len(list(FULL_GRID.cells()))}")
    options.add_seed_option(parser)
    options.add_check_timeout_option(parser, "a cell whose call runs")
    return parser


def run_tolerance_stage(subject: Subject, args: argparse.Namespace, out: Path, progress: StageProgress) -> ExitCode:
    """Sweep, write both files, and say whether every cell passed."""
    grid = QUICK_GRID if args.quick else FULL_GRID
    total = len(list(grid.cells()))
    progress.begin(f"{total} cells, each checked against the float64 and mlx.core oracles")

    def show(done: int, count: int, cell: SweepCell) -> None:
        progress.update(done, count, f"cells ({cell.label})")

    document = options.start_document("tolerance", args)
    # A sandboxed subject's calls are bounded in its worker; an alarm here would leave its pipe mid-reply.
    timeout = args.check_timeout
    if subject.call_time_limit is not None:
        subject.call_time_limit(args.check_timeout)
        timeout = 0.0
    interrupted: PartialRun | None = None

    def keep(partial: PartialRun) -> None:
        # tolerance.json over the cells so far, marked INCOMPLETE; the finished sweep writes over it.
        write_json(out / "tolerance.json", {**document, **partial.partial, "passed": False,
                                            "interrupted": partial.record})  # fmt: skip

    try:
        document.update(run_sweep(subject.get("paged_attention"), grid, seed=args.seed, progress=show,
                                  call_timeout_s=timeout, checkpoint=keep, begin_cell=subject.begin_check))
    except PartialRun as exc:
        if not exc.partial["rows"]:
            raise
        interrupted = exc
        # What finished is kept, and the sweep does not pass: it did not measure every cell.
        document.update(exc.partial, passed=False, interrupted=exc.record)
    document["plot"] = PLOT_FILE
    (out / PLOT_FILE).write_text(render_tolerance_plot(document))
    write_json(out / "tolerance.json", document)
    (out / "tolerance.md").write_text(render_tolerance(document))
    if interrupted is not None:
        progress.finish(f"{interrupted}; tolerance.md keeps the cells that finished")
        raise KeyboardInterrupt
    totals = document["totals"]
    progress.finish(
        f"{totals['passed']}/{totals['rows']} cells within tolerance"
        + (f", {totals['declined']} unsupported (a declined dtype)" if totals["declined"] else "")
    )
    return ExitCode.OK if document["passed"] else ExitCode.TOLERANCE_EXCEEDED


def run(args: argparse.Namespace) -> int:
    try:
        subject = prepare_subject(args, needs=("paged_attention",))
    except SubjectSetupError as exc:
        print(f"pagecheck {NAME}: {exc}", file=sys.stderr)
        return exc.code
    out = options.report_dir(args)
    try:
        code = run_tolerance_stage(subject, args, out, StageProgress(NAME, 1, 1))
    except KeyboardInterrupt:
        if (out / "tolerance.json").exists():  # the cells that finished, marked INCOMPLETE
            write_index(out, ("tolerance",))
        raise
    write_index(out)
    print(f"pagecheck {NAME}: wrote {out / 'tolerance.md'}")
    return code
