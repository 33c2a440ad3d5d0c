"""Skips that are neither a pass nor a failure: a grade and a report leave them out.

A check does not apply to a subject that declines an optional dtype (dtype_support.py): its skip reason
starts with UNSUPPORTED_DTYPE. Any other skip (a missing API name, say) is a check that did not pass.
"""

from __future__ import annotations

from typing import Any

from pagecheck.invariants.dtype_support import UNSUPPORTED_DTYPE

NEUTRAL_SKIP_PREFIXES = (UNSUPPORTED_DTYPE,)


def is_neutral_skip(check: dict[str, Any]) -> bool:
    """Whether a results entry is a skip that counts neither as passed nor as failed."""
    return check["outcome"] == "skip" and check["message"].startswith(NEUTRAL_SKIP_PREFIXES)
