"""Every exit status the `pagecheck` command can return, in one place.

When a run finds several problems it returns the most serious one; the
order of SEVERITY says which that is.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    INVARIANT_FAILED = 1
    # argparse exits with 2 on a bad command line; the enum keeps that meaning.
    USAGE = 2
    SUBJECT_LOAD_FAILED = 3
    TOLERANCE_EXCEEDED = 4
    BENCH_INCORRECT = 5
    SUITE_ERROR = 6
    DEVICE_UNAVAILABLE = 7
    SUITE_CRASHED = 8
    # pagecheck itself raised: a bug in pagecheck, not a verdict on the subject.
    INTERNAL_ERROR = 9
    # The command's process ended before pagecheck finished (pagecheck.supervisor says so).
    ENDED_EARLY = 10
    # 128 + SIGINT, what a shell reports for a command stopped with Ctrl-C.
    INTERRUPTED = 130


# Most serious first: a subject that does not load or a suite that cannot run
# says nothing about correctness, so it outranks any verdict.
SEVERITY: tuple[ExitCode, ...] = (
    ExitCode.INTERRUPTED,
    ExitCode.ENDED_EARLY,
    ExitCode.INTERNAL_ERROR,
    ExitCode.USAGE,
    ExitCode.DEVICE_UNAVAILABLE,
    ExitCode.SUBJECT_LOAD_FAILED,
    ExitCode.SUITE_CRASHED,
    ExitCode.SUITE_ERROR,
    ExitCode.INVARIANT_FAILED,
    ExitCode.TOLERANCE_EXCEEDED,
    ExitCode.BENCH_INCORRECT,
    ExitCode.OK,
)


def most_serious(codes: list[ExitCode]) -> ExitCode:
    """The code a run with these outcomes should exit with (OK for none)."""
    for code in SEVERITY:
        if code in codes:
            return code
    return ExitCode.OK


MEANING: dict[ExitCode, str] = {
    ExitCode.OK: "everything run passed",
    ExitCode.INVARIANT_FAILED: "an invariant is broken; conformance.md names it and shows the counterexample",
    ExitCode.USAGE: "the command line is wrong",
    ExitCode.SUBJECT_LOAD_FAILED: "the subject could not be imported or lacks paged_attention",
    ExitCode.TOLERANCE_EXCEEDED: "some tolerance-sweep cell is outside the tolerance table",
    ExitCode.BENCH_INCORRECT: "a benchmarked variant raised, or its output is further than atol from float64",
    ExitCode.SUITE_ERROR: "the invariants suite ran but reached no verdict for some checks (none collected, or "
    "collection errors; see invariants.log); for grade, no sandboxed worker could run here, so nothing was graded",
    ExitCode.SUITE_CRASHED: "the invariants suite crashed (killed by a signal, a pytest usage or internal error, no "
    "results, or a worker died under a check); index.md shows the cause from invariants.log",
    ExitCode.DEVICE_UNAVAILABLE: "--device gpu was asked for and MLX has no GPU here (for grade: none that a "
    "sandboxed worker can use)",
    ExitCode.INTERNAL_ERROR: "pagecheck itself failed (a bug in pagecheck; the traceback is on stderr)",
    ExitCode.ENDED_EARLY: "the command's process ended before pagecheck finished: code in it (the subject's, most "
    "likely) called os._exit or sys.exit at its import or inside a call; nothing it wrote is a verdict",
    ExitCode.INTERRUPTED: "stopped by SIGINT or SIGTERM; what finished is written, marked INCOMPLETE (grade's "
    "results, serve-bench's runs, tolerance's cells, bench's contexts, report's stages)",
}


def describe_exit_codes() -> str:
    """One line per code, for --help epilogs."""
    return "\n".join(f"  {int(code)}  {code.name}: {MEANING[code]}" for code in sorted(ExitCode))
