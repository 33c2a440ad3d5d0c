"""Skips that are neither a pass nor a failure: a grade and a report leave them out.

Two reasons a check may not apply to a subject, each with a fixed, greppable start of its skip reason:
- UNSUPPORTED_DTYPE: the subject declines an optional dtype (dtype_support.py);
- IN_PROCESS_ONLY: the check injects a failure into the subject's methods or watches its calls to MLX,
  which it can do only when the subject runs in the suite's own process (not in grading's sandboxed
  worker, whose objects are proxies here).
Any other skip (a missing API name, say) is a check that did not pass.
"""

from __future__ import annotations

from typing import Any

import pytest

from pagecheck.invariants.dtype_support import UNSUPPORTED_DTYPE

IN_PROCESS_ONLY = "needs the subject in this process"
NEUTRAL_SKIP_PREFIXES = (UNSUPPORTED_DTYPE, IN_PROCESS_ONLY)


def require_in_process(subject: Any, what: str) -> None:
    """Skip the running check, neutrally, when `subject` lives in another process."""
    if not getattr(subject, "in_process", True):
        pytest.skip(f"{IN_PROCESS_ONLY}: {what}, and this subject runs in a sandboxed worker")


def is_neutral_skip(check: dict[str, Any]) -> bool:
    """Whether a results entry is a skip that counts neither as passed nor as failed."""
    return check["outcome"] == "skip" and check["message"].startswith(NEUTRAL_SKIP_PREFIXES)
