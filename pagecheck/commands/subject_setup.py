"""Selecting the device and loading the subject, with the exit code each failure maps to."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pagecheck.device import DeviceUnavailable, use_device
from pagecheck.exit_codes import ExitCode
from pagecheck.progress import open_standard_streams
from pagecheck.invariants.check_timeout import time_limit
from pagecheck.invariants.subject import Subject, SubjectError, load_subject


class SubjectSetupError(RuntimeError):
    def __init__(self, message: str, code: ExitCode) -> None:
        super().__init__(message)
        self.code = code


# Modules pagecheck's own process goes on using after a subject's import: a subject that removes or replaces one
# (sys.modules["mlx.core"] = None) would break pagecheck, not itself.
KEPT_MODULES = ("mlx", "mlx.core", "numpy")


def _undo_subject_damage(kept: dict[str, Any]) -> None:
    """Put back what a subject's import took from the process pagecheck reports from: the modules it goes on using
    and the standard streams (a closed sys.stdout would fail the report's own printing)."""
    for name, module in kept.items():
        if module is not None and sys.modules.get(name) is not module:
            sys.modules[name] = module
    open_standard_streams()


def prepare_subject(args: argparse.Namespace, needs: tuple[str, ...]) -> Subject:
    """Use args.device, load args.subject, and insist it provides every name in `needs`. The import is held to
    the command's time limit for a call into the subject (--check-timeout, else bench's --process-timeout), so a
    subject that never finishes importing fails to load rather than holding the command for ever."""
    try:
        use_device(args.device)
    except DeviceUnavailable as exc:
        raise SubjectSetupError(str(exc), ExitCode.DEVICE_UNAVAILABLE) from exc
    limit = next(((getattr(args, name), f"--{name.replace('_', '-')}") for name in ("check_timeout", "process_timeout")
                  if getattr(args, name, None)), (0.0, ""))  # fmt: skip
    kept = {name: sys.modules.get(name) for name in KEPT_MODULES}
    try:
        with time_limit(*limit):
            subject = load_subject(args.subject)
    except SubjectError as exc:
        raise SubjectSetupError(str(exc), ExitCode.SUBJECT_LOAD_FAILED) from exc
    finally:
        _undo_subject_damage(kept)
    absent = [name for name in needs if not subject.has(name)]
    if absent:
        raise SubjectSetupError(
            f"subject spec={args.subject!r} ({subject.origin}) has no {', '.join(absent)}, which this command needs",
            ExitCode.SUBJECT_LOAD_FAILED,
        )
    return subject
