"""The `pagecheck` command: one subcommand per module listed in COMMANDS.

Adding a subcommand: write pagecheck/commands/<name>.py with
add_parser(subparsers) -> ArgumentParser and run(args) -> int (an ExitCode),
then add the module to COMMANDS.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import traceback
from types import FrameType, ModuleType

from pagecheck.commands import serve_bench
from pagecheck.commands import bench, grade, options, report, tolerance
from pagecheck.environment import pagecheck_version
from pagecheck.exit_codes import ExitCode

COMMANDS: tuple[ModuleType, ...] = (report, tolerance, bench, grade, serve_bench)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pagecheck",
        description="Check, measure and benchmark a paged-attention implementation against the references.\n"
        "Start with `pagecheck report`: it runs everything on the built-in implementation.",
        epilog=options.EXIT_CODES_EPILOG + "\n\n`pagecheck COMMAND --help` explains each command's options.",
        formatter_class=options.HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"pagecheck {pagecheck_version()}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMANDS:
        module.add_parser(subparsers).set_defaults(run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    # `python -m pytest`, which runs the invariants suite, imports from the current directory;
    # the console script does not. Doing the same here loads a module or file subject the
    # same way in both processes.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    args = build_parser().parse_args(argv)
    # SIGTERM stops a command as Ctrl-C does: each command's own KeyboardInterrupt handling keeps what finished.
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if main_thread else None
    try:
        return int(args.run(args))
    except options.OutDirError as exc:
        print(f"pagecheck {args.command}: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    except KeyboardInterrupt:
        print(f"pagecheck {args.command}: interrupted", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    except Exception:
        # Exit 1 would read as a broken invariant; this is pagecheck's own failure.
        traceback.print_exc()
        print(f"pagecheck {args.command}: internal error (a bug in pagecheck; the traceback is above)", file=sys.stderr)
        return int(ExitCode.INTERNAL_ERROR)
    finally:
        if main_thread and previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


if __name__ == "__main__":
    sys.exit(main())
