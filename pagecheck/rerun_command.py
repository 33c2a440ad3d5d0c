"""The shell command that reruns one check of the invariants suite, pasteable in any directory.

Everything in it is absolute: the Python that ran the report, the check's
file, the subject (pagecheck.subject.absolute_spec); the seed and the
Hypothesis profile are the run's, so the check draws the same inputs. A
module subject resolves through sys.path, so the command puts the report's
working directory on PYTHONPATH for it.

The suite's command-line interface (option names, how a check is named)
appears in rerun_command alone: a change to it is a change to that function.
"""

from __future__ import annotations

import os
import shlex
import sys

from pagecheck.subject import absolute_spec
from pagecheck.suite_run import invariants_dir

SUITE_PACKAGE = "invariants"
BUILT_IN_SPECS = ("impl", "reference")


def _is_module_spec(spec: str) -> bool:
    return spec not in BUILT_IN_SPECS and all(part.isidentifier() for part in spec.split("."))


def rerun_command(
    nodeid: str | None, *, subject: str, device: str, seed: int, profile: str, invariants: tuple[str, ...] = ()
) -> str:
    """`python -m pytest <check> --subject ... --pagecheck-seed ...` for the check `nodeid` (as results name it).

    Without a node id: the whole suite, or the checks of `invariants`.
    """
    target = str(invariants_dir())
    if nodeid is not None:
        check_file, _, check_name = nodeid.partition("::")
        target = str(invariants_dir() / check_file.removeprefix(f"{SUITE_PACKAGE}/")) + (f"::{check_name}" if check_name else "")
    spec = absolute_spec(subject)
    words = [
        sys.executable, "-m", "pytest", target, "-p", "no:cacheprovider",
        "--subject", spec, "--device", device, "--pagecheck-seed", str(seed), "--pagecheck-profile", profile,
        *(word for invariant in invariants for word in ("--pagecheck-invariant", invariant)),
    ]  # fmt: skip
    command = " ".join(shlex.quote(word) for word in words)
    if _is_module_spec(spec):
        command = f"PYTHONPATH={shlex.quote(os.getcwd())}${{PYTHONPATH:+:$PYTHONPATH}} {command}"
    return command
