"""The `pagecheck` command: one subcommand per module listed in COMMANDS.

Adding a subcommand: write pagecheck/commands/<name>.py with
add_parser(subparsers) -> ArgumentParser and run(args) -> int (an ExitCode),
then add the module to COMMANDS.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from types import FrameType

from pagecheck import supervisor
from pagecheck.exit_codes import ExitCode
from pagecheck.progress import open_standard_streams
from pagecheck.invariants.subject import UserInterrupt

# The command modules under pagecheck.commands, imported when a parser is built: the watcher process
# (pagecheck.supervisor) needs none of them, nor MLX.
COMMANDS: tuple[str, ...] = ("report", "tolerance", "bench", "grade", "serve_bench")
# The signals that stop a command as Ctrl-C does (a closed terminal's SIGHUP too: an ssh session that drops keeps
# what finished), and how close a repeat must come to count as the same one.
INTERRUPTS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
DUPLICATE_S = 1.0


def build_parser() -> argparse.ArgumentParser:
    from pagecheck.commands import options
    from pagecheck.environment import pagecheck_version

    parser = argparse.ArgumentParser(
        prog="pagecheck",
        description="Check, measure and benchmark a paged-attention implementation against the references.\n"
        "Start with `pagecheck report`: it runs everything on the built-in implementation.",
        epilog=options.EXIT_CODES_EPILOG + "\n\n`pagecheck COMMAND --help` explains each command's options.",
        formatter_class=options.HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"pagecheck {pagecheck_version()}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(f"pagecheck.commands.{name}")
        module.add_parser(subparsers).set_defaults(run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run a command; from the console (no `argv`) on Linux, in a watched child process (pagecheck.supervisor)."""
    open_standard_streams()
    if argv is None and supervisor.wanted():
        return supervisor.watch(sys.argv[1:], _command_name(sys.argv[1:]))
    supervisor.become_child()
    # Sent only here and for argparse's exits: a SystemExit from inside a command (a subject's sys.exit)
    # leaves the watcher without a status, and it reports the run as ended early.
    code = _run(argv)
    supervisor.send_result(code)
    return code


def _command_name(args: list[str]) -> str:
    """The subcommand named on a command line, for the watcher's messages."""
    return next((arg for arg in args if not arg.startswith("-")), "")


def _shown_name(argv: list[str] | None) -> str:
    """"pagecheck COMMAND" for messages, or "pagecheck" before a command is known."""
    name = _command_name(sys.argv[1:] if argv is None else argv)
    return f"pagecheck {name}" if name else "pagecheck"


def _run(argv: list[str] | None) -> int:
    from pagecheck.commands import options

    parser = build_parser()  # imports every command, and through them the standard library modules they use
    # SIGTERM stops a command as Ctrl-C does: each command's own KeyboardInterrupt handling keeps what finished.
    interrupt = _Interrupt()
    main_thread = threading.current_thread() is threading.main_thread()
    previous = {signum: signal.signal(signum, interrupt) for signum in INTERRUPTS} if main_thread else {}
    supervisor.unblock_interrupts()  # a watched child held them until now
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # a usage error, --help, --version
            supervisor.send_result(exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1)
            raise
        supervisor.send_started()
        # A module subject in the current folder resolves as under `python -m pytest`, which runs the invariants
        # suite; the folder goes last, so that a random.py there cannot stand in for the standard library's, here
        # or in the worker processes that start from this one's sys.path (serve-bench's). Not for grade: a grader
        # started among the submissions would import a student's folder named `mlx` (a namespace package gives way
        # to any regular package of its name on sys.path) into itself.
        if args.command != "grade" and os.getcwd() not in sys.path:
            sys.path.append(os.getcwd())
        # Folders named on the command line are the caller's: a subject's os.chdir cannot move the report.
        args.invoked_in = os.getcwd()
        if isinstance(getattr(args, "out", None), Path):
            args.out = Path(args.invoked_in, args.out)
        return int(args.run(args))
    except options.OutDirError as exc:
        print(f"{_shown_name(argv)}: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    except KeyboardInterrupt:
        print(f"{_shown_name(argv)}: interrupted", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    except Exception:
        # Exit 1 would read as a broken invariant; this is pagecheck's own failure.
        traceback.print_exc()
        print(f"{_shown_name(argv)}: internal error (a bug in pagecheck; the traceback is above)", file=sys.stderr)
        return int(ExitCode.INTERNAL_ERROR)
    finally:
        options.release_out_dirs()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class _Interrupt:
    """INTERRUPTS (SIGINT, SIGTERM, SIGHUP) as KeyboardInterrupt. A signal within DUPLICATE_S of the first is the
    same interrupt delivered twice, as when a Ctrl-C sent to the whole process group also reaches the watcher,
    which passes it on (pagecheck.supervisor), and is ignored, so that it cannot cut short the first one's
    handling; a later one stops the command again."""

    raises = UserInterrupt  # the subject's own KeyboardInterrupt is told apart from this (is_user_interrupt)

    def __init__(self) -> None:
        self.first: float | None = None
        self.pending: str | None = None  # what it raised, for a caller to raise again (raise_if_interrupted)

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if self.first is not None and now - self.first < DUPLICATE_S:
            return
        self.first = now
        self.pending = signal.Signals(signum).name
        raise UserInterrupt(self.pending)


if __name__ == "__main__":
    sys.exit(main())
