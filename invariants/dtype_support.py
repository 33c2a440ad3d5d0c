"""Which dtypes a subject's paged_attention takes: float32 and bfloat16 must work, others may be declined.

The course's own solution supports float32 and bfloat16 only and rejects
float16 with a ValueError. A subject declines a dtype by raising ValueError,
TypeError or NotImplementedError whose message names the dtype, before doing
any work (every input array unchanged). Every check parametrised by dtype
calls `require_dtype` first: a declined optional dtype skips the check with a
reason that starts with UNSUPPORTED_DTYPE (reports and grades show it as
unsupported, never as a failure); a declined required dtype fails the check.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest

from pagecheck.invariants.calls import call_attention
from pagecheck.invariants.verdict import InvariantViolation, same_array
from pagecheck.reference.arrays import to_numpy
from pagecheck.reference.layouts import PagedLayout, random_layout

UNSUPPORTED_DTYPE = "unsupported dtype"  # the fixed start of every skip reason for a declined dtype
REQUIRED_DTYPES = ("float32", "bfloat16")  # the course's dtypes: declining one is a failure
DECLINE_ERRORS = (ValueError, TypeError, NotImplementedError)
INPUT_ARRAYS = ("query", "key_pages", "value_pages", "block_table", "context_lens")


def names_dtype(message: str, dtype: str) -> bool:
    """Whether `message` names `dtype` as a word: "float16" is not named by "bfloat16"."""
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(dtype)}(?![A-Za-z0-9_])", message) is not None


def probe_layout(dtype: str) -> PagedLayout:
    """A small valid decode layout in `dtype`: two requests, one crossing a page boundary."""
    return random_layout(np.random.default_rng(0), context_lens=[5, 3], page_size=4, dtype=dtype)


@dataclass(frozen=True)
class Probe:
    """What one call in a dtype showed: it computed (said is None), or it raised `said` and that was a clean decline."""

    said: str | None = None
    problem: str | None = None  # why a raise is not a clean decline: the dtype unnamed, or an input changed


# (id of the subject's paged_attention, dtype) -> (that paged_attention, kept alive so the id stays its own; Probe)
_PROBES: dict[tuple[int, str], tuple[Callable[..., Any], Probe]] = {}


def probe(paged_attention: Callable[..., Any], dtype: str) -> Probe:
    """What the subject does with a valid layout in `dtype`; asked once per run (Hypothesis checks ask per example)."""
    key = (id(paged_attention), dtype)
    if key not in _PROBES:
        _PROBES[key] = (paged_attention, _probe_once(paged_attention, dtype))
    return _PROBES[key][1]


def _probe_once(paged_attention: Callable[..., Any], dtype: str) -> Probe:
    inputs = probe_layout(dtype).as_mx()
    before = {name: to_numpy(inputs[name]).copy() for name in INPUT_ARRAYS}
    try:
        call_attention(paged_attention, inputs)
    except DECLINE_ERRORS as exc:
        said = f"{type(exc).__name__}: {exc}"
        if not names_dtype(str(exc), dtype):
            return Probe(said, "a subject that declines a dtype must name it")
        changed = [name for name in INPUT_ARRAYS if not same_array(inputs[name], before[name])]
        if changed:
            return Probe(said, f"declining changed the inputs {changed}")
        return Probe(said)
    return Probe()


def require_dtype(paged_attention: Callable[..., Any], dtype: str, invariant: str) -> None:
    """Return when the subject computes `dtype`; skip the calling check when it declines an optional one.

    Fails (InvariantViolation of `invariant`) when the subject declines a
    required dtype, declines without naming the dtype, or changes an input
    while declining.
    """
    result = probe(paged_attention, dtype)
    if result.said is None:
        return
    if result.problem is not None:
        raise InvariantViolation(invariant, f"valid {dtype} inputs raised {result.said!r}: {result.problem}")
    if dtype in REQUIRED_DTYPES:
        raise InvariantViolation(
            invariant, f"the subject declines {dtype} ({result.said!r}), which is required: {', '.join(REQUIRED_DTYPES)}"
        )
    pytest.skip(f"{UNSUPPORTED_DTYPE} {dtype}: the subject declines it ({result.said})")
