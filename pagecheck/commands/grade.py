"""`pagecheck grade SUBMISSION...` and `pagecheck grade merge DIR...`: grading student submissions.

Grading writes, under --out:

    results/<name>.json   everything about one submission (written when it finishes; reused on a rerun)
    grades.md, grades.csv the scoreboard (reproducible byte for byte: no times in it)
    feedback/<name>.md    what the student sees: failed invariants, counterexamples, commands
    logs/<name>/          build, suite and worker output, for the grader's eyes
    secret.txt            the secret, when --seed was not given (kept out of feedback/)

Each submission runs in a sandboxed worker (pagecheck/grading/DESIGN.md); the
protections this machine could not give are listed when the run starts and
in grades.md.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

from pagecheck.invariants.catalog import INVARIANTS
from pagecheck.invariants.check_timeout import MIN_CHECK_TIMEOUT_S
from pagecheck.invariants.profiles import DEFAULT_PROFILE, PROFILES
from pagecheck.arg_types import int_in, number_up_to, path_arg
from pagecheck.commands import options
from pagecheck.device import DeviceUnavailable, check_device
from pagecheck.exit_codes import ExitCode
from pagecheck.grading.merge import merge_results
from pagecheck.grading.outputs import out_problem, write_outputs
from pagecheck.grading.results_store import SCOREBOARD, load_all_results
from pagecheck.grading.plan import DEFAULT_CALL_TIMEOUT_S, DEFAULT_DISK_BYTES, GradePlan
from pagecheck.grading.rubric import DEFAULT_RUBRIC, Rubric, load_rubric
from pagecheck.grading.sandbox import (
    GIB, MAX_BYTES, MAX_SECONDS, GradingInterrupted, LiveChildren, Limits, loads_cuda,
)
from pagecheck.grading.schedule import jobs_to_run, run_jobs
from pagecheck.grading.seeds import MIN_SECRET_LENGTH, SECRET_FILE, read_secret, resolve_secret
from pagecheck.grading.shards import expected_names, parse_shard, write_manifest
from pagecheck.grading.submission import load_submissions
from pagecheck.grading.worker_process import preflight_worker, probe_protections, sandbox_notes
from pagecheck.progress import StageProgress

NAME = "grade"
MERGE = "merge"
DEFAULT_OUT = Path("reports") / "grade"
DEFAULT_JOBS = max(1, (os.cpu_count() or 2) // 2)  # --jobs on the CPU

def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = options.add_command_parser(
        subparsers,
        NAME,
        "grade submissions (tiny-llm checkouts, .py files, packages) against the invariants",
        "Run the invariants suite on each submission in its own limited process (wall clock, memory,\n"
        "scrubbed environment), twice: on the public inputs and on hidden inputs derived from --seed.\n"
        "Write per-submission results, a scoreboard (grades.md, grades.csv) and feedback files.\n"
        "The scoreboard has two totals: the course's clauses (checks that mirror the course's own tests)\n"
        "and, apart, the clauses beyond the course; a stricter check never costs a course point.\n"
        "Rerunning into the same --out skips finished submissions.\n\n"
        f"`pagecheck grade {MERGE} DIR... --out OUT` joins the outputs of --shard runs into one scoreboard.",
    )
    parser.add_argument("submissions", nargs="+", metavar="SUBMISSION",
                        help=f"tiny-llm checkouts, .py files or package directories (or: {MERGE} DIR...)")  # fmt: skip
    parser.add_argument("--out", type=path_arg, default=DEFAULT_OUT, metavar="DIR", help="output directory (default: %(default)s)")
    parser.add_argument("--jobs", type=int_in(1, options.MAX_JOBS), default=None, metavar="N",
                        help="submissions graded at once; each sandboxed worker is one CPU scheduling group where "
                        "the kernel groups by session (the protection cpu_share says whether it does); at most "
                        f"{options.MAX_JOBS}; 1 with --device gpu, or on any device where MLX runs on CUDA, whose "
                        "workers keep file locks two submissions could talk through (default: half the CPUs, "
                        f"{DEFAULT_JOBS} here; 1 there)")  # fmt: skip
    parser.add_argument("--timeout", type=number_up_to(MAX_SECONDS, least=1.0), default=300.0, metavar="S",
                        help="wall-clock limit of each suite run, in seconds (default: %(default)g)")  # fmt: skip
    parser.add_argument("--build-timeout", type=number_up_to(MAX_SECONDS, least=1.0), default=600.0, metavar="S",
                        help="wall-clock limit of an extension build, in seconds (default: %(default)g)")  # fmt: skip
    parser.add_argument("--memory", type=number_up_to(MAX_BYTES / GIB), default=4.0, metavar="GB",
                        help="memory limit of the sandboxed worker (and of a build), in GiB: its address space, or "
                        "where MLX runs on CUDA (--device gpu, or a CUDA build of MLX) its data segment (CUDA needs "
                        "more address space than it uses) (default: %(default)g)")  # fmt: skip
    parser.add_argument("--call-timeout", type=number_up_to(MAX_SECONDS, least=MIN_CHECK_TIMEOUT_S),
                        default=DEFAULT_CALL_TIMEOUT_S, metavar="S",
                        help="wall-clock limit of each call into the submission, in seconds; a call past it fails "
                        "its check (default: %(default)g)")  # fmt: skip
    parser.add_argument("--disk", type=number_up_to(MAX_BYTES / GIB), default=DEFAULT_DISK_BYTES / GIB, metavar="GB",
                        help="size of the worker's (and a build's) scratch folder, in GiB (default: %(default)g)")  # fmt: skip
    secret = parser.add_mutually_exclusive_group()
    secret.add_argument("--seed", default=None, metavar="SECRET",
                        help="secret the hidden inputs are drawn from (default: the one in --seed-file, else the one "
                        "saved in OUT/secret.txt, else a new random one saved there)")  # fmt: skip
    secret.add_argument("--seed-file", type=path_arg, default=None, metavar="PATH",
                        help="read the secret from this file, which keeps it off the command line")  # fmt: skip
    parser.add_argument("--shard", default=None, metavar="i/n", help="grade only shard i of n (1-based)")
    parser.add_argument("--force", action="store_true", help="grade again even where a finished result exists")
    parser.add_argument("--rubric", type=path_arg, default=None, metavar="PATH",
                        help=f"points per clause ([points]: course, [beyond_course]) and anti-cheat actions, TOML "
                        f"(default: {DEFAULT_RUBRIC.name} shipped with pagecheck)")  # fmt: skip
    parser.add_argument("--invariants", default=None, metavar="ID,ID",
                        help="grade only these invariants (default: all): " + ", ".join(INVARIANTS))  # fmt: skip
    parser.add_argument("--profile", default=DEFAULT_PROFILE, choices=sorted(PROFILES),
                        help="Hypothesis search depth (default: %(default)s)")
    options.add_device_option(parser)
    return parser


def _selected_invariants(text: str | None) -> tuple[str, ...]:
    """The invariants --invariants names; () for all, where the option is not given."""
    if text is None:
        return ()
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    if not names:
        raise ValueError(f"invariants={text!r} names no invariant (leave the option out to grade all)")
    unknown = [name for name in names if name not in INVARIANTS]
    if unknown:
        raise ValueError(f"invariants={text!r} names {unknown}, which are not in invariants/catalog.py")
    return names


def _remove_if_empty(directory: Path) -> None:
    """Each submission removes its own working copy; the parent goes once a run leaves none behind."""
    if directory.is_dir() and not any(directory.iterdir()):
        directory.rmdir()


MERGE_OPTIONS = ("out", "rubric")  # what `grade merge` reads; the shards' results hold everything else


def _grading_options_given(args: argparse.Namespace) -> list[str]:
    """The options of a grading run set on the command line (away from their defaults), which merge ignores."""
    parser = add_parser(argparse.ArgumentParser().add_subparsers())
    return [action.option_strings[-1] for action in parser._actions
            if action.option_strings and action.dest not in (*MERGE_OPTIONS, "help")
            and getattr(args, action.dest, action.default) != action.default]  # fmt: skip


def run_merge(args: argparse.Namespace, rubric: Rubric) -> ExitCode:
    shard_dirs = [Path(d) for d in args.submissions[1:]]
    if not shard_dirs:
        raise ValueError(f"`pagecheck grade {MERGE}` needs at least one shard directory")
    given = _grading_options_given(args)
    if given:
        raise ValueError(f"`pagecheck grade {MERGE}` takes only --out and --rubric (the shards' results hold the "
                         f"rest); {', '.join(given)} would be ignored")  # fmt: skip
    made = not args.out.exists()
    problem = out_problem(options.make_out_dir(args.out), [])
    if problem is not None:
        raise ValueError(problem)
    try:
        expected = expected_names(shard_dirs)
        merged = merge_results(shard_dirs, args.out)
    except ValueError:
        if made:
            _remove_if_empty(args.out)  # refused before anything was copied: no folder is left behind
        raise
    write_outputs(args.out, rubric)
    print(f"pagecheck {NAME} {MERGE}: {len(merged)} results from {len(shard_dirs)} directories; "
          f"scoreboard in {args.out / SCOREBOARD}")  # fmt: skip
    unfinished = sorted((expected or set()) - {d["name"] for d in merged})
    if unfinished:
        print(f"pagecheck {NAME} {MERGE}: warning: no result for {unfinished}, which their shard's run was given; "
              "grade them again in that shard (a rerun grades only what has no result)")  # fmt: skip
    return ExitCode.OK


def run_grading(args: argparse.Namespace, rubric: Rubric) -> ExitCode:
    if args.jobs is None:
        args.jobs = 1 if loads_cuda(args.device) else DEFAULT_JOBS
    elif args.jobs > 1 and loads_cuda(args.device):
        where = "with --device gpu" if args.device == "gpu" else "on this machine, whose MLX runs on CUDA"
        raise ValueError(f"--jobs={args.jobs} {where}: a worker that loads MLX's CUDA back-end keeps file locks "
                         "(its driver's), through which submissions graded side by side could tell each other what "
                         "they saw; grade one at a time (--jobs 1)")  # fmt: skip
    try:
        # The trusted suite runs its checks on this device: without it they would all skip, and every
        # submission would get a grade made of no check.
        check_device(args.device)
    except DeviceUnavailable as exc:
        print(f"pagecheck {NAME}: {exc}; no submission was graded", file=sys.stderr)
        return ExitCode.DEVICE_UNAVAILABLE
    submissions = load_submissions(args.submissions)
    shard = None
    if args.shard is not None:
        shard = parse_shard(args.shard)
        all_names = [s.name for s in submissions]
        submissions = [s for s in submissions if shard.holds(s.name)]
    given = args.seed
    if args.seed_file is not None:
        given = read_secret(args.seed_file, f"--seed-file={str(args.seed_file)!r}")
    # Every limit is checked (GradePlan's own checks) before --out is made, so a usage error leaves no folder
    # and no saved secret behind; the secret comes once the folder is there.
    unseeded = GradePlan(
        secret="",
        limits=Limits(args.timeout, int(args.memory * GIB)),
        build_timeout_s=args.build_timeout,
        profile=args.profile,
        device=args.device,
        selected=_selected_invariants(args.invariants),
        call_timeout_s=args.call_timeout,
        disk_bytes=int(args.disk * GIB),
    )
    rubric.check_prices(list(unseeded.invariants))  # a rubric without points for a graded clause fails now
    out = args.out.resolve()
    for submission in submissions:
        if submission.path.is_dir() and (out == submission.path or submission.path in out.parents):
            # Its staged copy would hold the secret, the other results and their feedback; and each run would
            # change its digest, so no result could be reused.
            raise ValueError(f"--out={str(args.out)!r} lies inside submission {submission.name!r} "
                             f"({submission.path}): grade into a folder outside every submission")  # fmt: skip
    options.make_out_dir(args.out)
    problem = out_problem(args.out, [s.name for s in submissions])
    if problem is not None:
        raise ValueError(problem)
    plan = replace(unseeded, secret=resolve_secret(given, args.out))
    if len(plan.secret) < MIN_SECRET_LENGTH:
        where = "--seed-file's secret" if args.seed_file else "--seed" if args.seed else f"the saved secret ({SECRET_FILE})"
        print(f"pagecheck {NAME}: warning: {where} is under {MIN_SECRET_LENGTH} characters and can be guessed; "
              "hidden inputs are only as hidden as the secret")  # fmt: skip
    # A scoreboard holds results graded one way: earlier results of submissions this run leaves alone, graded with
    # other settings (other invariants, limits, seed...), would sit beside this run's, scored on other clauses.
    settings, names = plan.settings(), {s.name for s in submissions}
    regrading = frozenset(names)
    others = sorted(d["name"] for d in load_all_results(args.out, regrading)
                    if d["name"] not in names and d["settings"] != settings)  # fmt: skip
    if others:
        raise ValueError(
            f"--out={str(args.out)!r} holds results for {others} graded with other settings than this run's; their "
            "scoreboard would mix the two. Grade into another --out, or grade those submissions again with these"
        )
    if shard is not None:
        write_manifest(args.out, shard, all_names)
    todo, reused = jobs_to_run(submissions, plan, args.out, force=args.force)
    progress = StageProgress(NAME, 1, 1)
    progress.begin(f"{len(todo)} to grade, {len(reused)} finished earlier, {args.jobs} at a time; output in {args.out}")
    if todo:
        for note in sandbox_notes(probe_protections(), args.jobs):
            progress.note(note)
        unusable = preflight_worker(args.device, plan.worker_limits)
        if unusable is not None:
            print(f"pagecheck {NAME}: a sandboxed worker cannot run with --device {args.device} on this machine, "
                  f"so no submission was graded: {unusable}")  # fmt: skip
            return ExitCode.DEVICE_UNAVAILABLE if args.device == "gpu" else ExitCode.SUITE_ERROR
    live = LiveChildren()
    # SIGTERM arrives as KeyboardInterrupt (pagecheck.cli.main installs that for every command).
    try:
        finished = run_jobs(todo, plan, args.out, jobs=args.jobs, live=live, progress=progress)
    except (KeyboardInterrupt, GradingInterrupted):
        # The scoreboard of what finished (this run's and earlier ones'), so that nothing graded waits on a rerun.
        documents = write_outputs(args.out, rubric, regrading)
        progress.note(f"interrupted; {SCOREBOARD} shows the {len(documents)} finished, a rerun grades the rest")
        return ExitCode.INTERRUPTED
    documents = write_outputs(args.out, rubric, regrading)
    _remove_if_empty(args.out / "work")
    progress.finish(f"graded {len(finished)}, reused {len(reused)}; scoreboard of {len(documents)} in "
                    f"{args.out / SCOREBOARD}")  # fmt: skip
    timed_out = [d for d in finished if d["verdict"] == "timed-out"]
    if finished and len(timed_out) == len(finished):
        print(f"pagecheck {NAME}: warning: every submission graded ran past --timeout {args.timeout:g} s; a whole "
              "suite run takes tens of seconds (see the README's timings)", file=sys.stderr)  # fmt: skip
    return ExitCode.OK


def run(args: argparse.Namespace) -> int:
    # Children run in directories of their own: every path handed to them must be absolute.
    args.out = options.resolved_out(args.out)
    try:
        rubric = load_rubric(args.rubric)
        if args.submissions[0] == MERGE:
            return run_merge(args, rubric)
        return run_grading(args, rubric)
    except ValueError as exc:
        print(f"pagecheck {NAME}: {exc}", file=sys.stderr)
        return ExitCode.USAGE
