"""Options several subcommands share, each defined once with its help text."""

from __future__ import annotations

import argparse

try:
    import fcntl
except ImportError:  # not on Windows: runs there are not held apart
    fcntl = None  # type: ignore[assignment]
import os
from pathlib import Path
from typing import Any

from pagecheck.input_files import resolve_path
from pagecheck.arg_types import int_in, number_up_to, path_arg, seed_int
from pagecheck.invariants.check_timeout import MAX_CHECK_TIMEOUT_S, MIN_CHECK_TIMEOUT_S
from pagecheck.invariants.profiles import DEFAULT_SEED
from pagecheck.device import DEVICES
from pagecheck.exit_codes import describe_exit_codes
from pagecheck.environment import collect_environment
from pagecheck.reports.document import default_report_dir, new_document
from pagecheck.reports.index import REPORT_FILES, set_aside_earlier_report
from pagecheck.invariants.subject import SANDBOX_PREFIX, spec_help


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the description's and the exit-code list's line breaks."""


EXIT_CODES_EPILOG = "exit codes:\n" + describe_exit_codes()


def add_command_parser(
    subparsers: argparse._SubParsersAction, name: str, summary: str, description: str
) -> argparse.ArgumentParser:
    return subparsers.add_parser(
        name, help=summary, description=description, epilog=EXIT_CODES_EPILOG, formatter_class=HelpFormatter
    )


def add_subject_option(parser: argparse.ArgumentParser, sandbox: bool = False) -> None:
    """--subject; `sandbox`: the command also runs a subject in grading's sandboxed worker (sandbox:SPEC)."""
    parser.add_argument(
        "--subject",
        default="impl",
        type=_subject_spec(sandbox),
        metavar="SPEC",
        help=f"the implementation to check: {spec_help(sandbox)} (default: %(default)s)",
    )


def _subject_spec(sandbox: bool) -> Any:
    """The --subject type: an empty spec names the kinds this command takes (and only those)."""

    def parse(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"an empty spec names no subject; give {spec_help(sandbox)}")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            # Its name goes into every report; a file name that is not UTF-8 cannot be written there.
            raise argparse.ArgumentTypeError(
                f"{os.fsencode(text)!r} is not valid UTF-8; rename the file or folder, or point a link with a "
                "UTF-8 name at it"
            ) from None
        return text if sandbox else _not_sandboxed(text)

    return parse


def _not_sandboxed(text: str) -> str:
    if text.strip().startswith(SANDBOX_PREFIX):
        raise argparse.ArgumentTypeError(
            f"{text!r}: {SANDBOX_PREFIX} subjects run only under `pagecheck tolerance` and `pagecheck grade` "
            "(which runs the invariants suite sandboxed)"
        )
    return text


def add_device_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device",
        choices=DEVICES,
        default="cpu",
        help="MLX device to run on; gpu means Metal on macOS, CUDA with mlx[cuda13] on Linux "
        "(default: %(default)s)",
    )


def add_out_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        type=path_arg,
        default=None,
        metavar="DIR",
        help="directory for the report files, created if missing; an earlier report's files there are moved "
        "into DIR/earlier-<time>/ first (default: reports/<subject>-<YYYYmmdd-HHMMSS>/ under the current directory)",
    )


def add_quick_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--quick", action="store_true", help=f"a smaller run: {what}")


def add_seed_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--seed",
        type=seed_int,
        default=DEFAULT_SEED,
        metavar="N",
        help="seed for every random draw (layouts, Hypothesis), so a run can be repeated exactly "
        "(default: %(default)s)",
    )


# The most worker processes --jobs starts (report's suite workers, grade's submissions at a time).
MAX_JOBS = 256


# Per invariants check or tolerance cell. The slowest check on the built-in subject takes seconds (all 208 run
# in about 20 s on two cores), so a correct subject hundreds of times slower still finishes inside it.
DEFAULT_CHECK_TIMEOUT_S = 600.0


def add_check_timeout_option(parser: argparse.ArgumentParser, what: str) -> None:
    """--check-timeout S: fail `what` (a phrase ending in its verb: "a cell whose call runs") past S seconds."""
    parser.add_argument(
        "--check-timeout",
        type=number_up_to(MAX_CHECK_TIMEOUT_S, least=MIN_CHECK_TIMEOUT_S),
        default=DEFAULT_CHECK_TIMEOUT_S,
        metavar="S",
        help=f"fail {what} past S seconds, so a subject that never returns holds that one, not the run "
        f"(default: %(default)g, from {MIN_CHECK_TIMEOUT_S:g} to {MAX_CHECK_TIMEOUT_S:g})",
    )


DEFAULT_JOBS = os.cpu_count() or 1


def add_jobs_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--jobs",
        type=int_in(0, MAX_JOBS),
        default=DEFAULT_JOBS,
        metavar="N",
        help="worker processes for the invariants suite (pytest-xdist); 0 runs it in the one child "
        f"process; at most {MAX_JOBS} (default: the number of CPUs, %(default)s here)",
    )


class OutDirError(Exception):
    """The --out folder cannot be made; the command line is at fault (pagecheck.cli reports it as USAGE)."""


def resolved_out(out: Path) -> Path:
    """`out` made absolute with every symbolic link followed; OutDirError for a loop of links."""
    try:
        return resolve_path(out)
    except OSError as exc:
        raise OutDirError(f"--out={str(out)!r} {exc.strerror}") from None


# The --out folders this process holds: folder -> the descriptor its lock is on (release_out_dirs ends them).
_HELD: dict[Path, int] = {}


def make_out_dir(out: Path) -> Path:
    """Create `out` (and its parents) if missing, and hold it for this run: OutDirError, naming --out and why,
    where it cannot be made, or where another pagecheck run holds it (two runs into one folder would each set the
    other's files aside and write over them). A symbolic link to a folder not made yet makes that folder, as a link
    to an existing one writes there."""
    folder = resolved_out(out)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        what = "is a file, not a folder" if out.exists() else f"cannot be created: {exc.strerror or exc}"
        raise OutDirError(f"--out={str(out)!r} {what}") from None
    if folder not in _HELD and fcntl is not None:
        try:
            descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:  # a folder that cannot be opened for reading: the run finds out what it may write there
            return out
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)  # on the folder itself: no file is left there
        except BlockingIOError:
            os.close(descriptor)
            raise OutDirError(f"--out={str(out)!r} is in use by another pagecheck run; wait for it to end or "
                              "choose another folder") from None  # fmt: skip
        except OSError:  # no flock on this file system (some NFS mounts): runs there are not held apart
            os.close(descriptor)
            return out
        _HELD[folder] = descriptor
    return out


def release_out_dirs() -> None:
    """Let other runs have the --out folders this one held (at the end of a command)."""
    while _HELD:
        os.close(_HELD.popitem()[1])


def _claim_new_folder(base: Path) -> Path:
    """`base`, or `base-2`, `base-3`, ... : the first that this process creates itself (mkdir fails where it
    exists), so two runs started in the same second never pick the same default folder. Where the parent cannot
    be made, `base` is returned for make_out_dir to name why."""
    try:
        base.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return base
    out, suffix = base, 2
    while True:
        try:
            out.mkdir()
            return out
        except FileExistsError:
            out = base.with_name(f"{base.name}-{suffix}")
            suffix += 1
        except OSError:
            return out


def report_dir(
    args: argparse.Namespace, default: Path | None = None, files: tuple[str, ...] = REPORT_FILES
) -> Path:
    """The --out directory, or a fresh default one (`default`, else one named after the subject); created
    before anything runs. The files of an earlier report found there (those named in `files`) are moved into a
    folder of their own inside it (said on stdout): this run's index reads this run's files only, and nothing
    earlier is overwritten."""
    if args.out is not None:
        out = args.out
    else:
        # Under the folder the command was started in, wherever the subject has gone since.
        out = Path(getattr(args, "invoked_in", ""), default or default_report_dir(args.subject))
        out = _claim_new_folder(out)
    out = make_out_dir(out)
    # Before anything runs: a folder that takes no files, or a folder in place of a report file, would otherwise
    # fail the run at its end.
    blocked = [name for name in files if (out / name).exists() and not (out / name).is_file()]
    if blocked:
        raise OutDirError(f"--out={str(out)!r} holds {', '.join(blocked)} as something other than a file; a report "
                          "writes files there")
    probe = out / f".pagecheck-write-check-{os.getpid()}"
    try:
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise OutDirError(f"--out={str(out)!r} takes no files: {exc.strerror or exc}") from None
    try:
        earlier = set_aside_earlier_report(out, files)
    except OSError as exc:
        raise OutDirError(f"--out={str(out)!r} holds an earlier report that cannot be moved aside: {exc}") from None
    if earlier is not None:
        print(f"pagecheck: {out} held an earlier report; its files are now in {earlier}")
        compare = getattr(args, "compare", None)
        if compare is not None and Path(getattr(args, "invoked_in", ""), compare).resolve() == (out / compare.name).resolve():
            args.compare = earlier / compare.name  # the run compared with is named where it is now
    return out


def profile_name(args: argparse.Namespace) -> str:
    return "quick" if args.quick else "full"


def start_document(kind: str, args: argparse.Namespace, subject: str | None = None) -> dict[str, Any]:
    """A report document's envelope for this command line, environment included."""
    document = new_document(
        kind, subject=subject or args.subject, device=args.device, seed=args.seed, profile=profile_name(args)
    )
    document["environment"] = collect_environment()
    return document
