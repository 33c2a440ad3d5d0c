"""Every call a graded subject's paged_attention receives is checked for changed inputs.

The suite's inputs_unchanged invariant checks its own calls; while grading,
the guard compares each array argument before and after every call made by
every check, and a changed one fails that check when it is beyond the course.
An implementation that clamps the caller's block table or scales the query in
place corrupts the serving loop that called it, whatever its output. The
course forbids no change as such: its tests fail one only where their own
later reads see it (a batch's block table read again after the call, the
query its dense outputs are computed from). So in a course clause a change is
advice, and the clause's own later reads judge it, as in process: the caller's
arrays were changed as the worker's were (remote_subject.py), and an argument
the worker handed out comes back to it as that very array, so the subject's
objects change where they would have in process.

The output must be an array (NumPy or MLX) when the call returns. Any other
object stays in the worker as a handle, and reading it (its length, its
items) runs the submission's code again after the call, where the worker's
gather watch, armed only during a call of paged_attention, sees nothing: a
dense gather deferred that way would go unreported.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from pagecheck.invariants.course import IN_COURSE_CLAUSE
from pagecheck.invariants.verdict import same_array
from pagecheck.reference.arrays import to_numpy

ARRAY_ARGUMENTS = ("query", "key_pages", "value_pages", "block_table", "context_lens")


class InputMutationError(AssertionError):
    """paged_attention changed an array it was given."""


class OutputTypeError(AssertionError):
    """paged_attention returned something other than an array."""


def _is_array(value: Any) -> bool:
    return isinstance(value, np.ndarray) or type(value).__module__.startswith("mlx")


def guard_inputs(
    paged_attention: Callable[..., Any], advise: Callable[[str], None] | None = None
) -> Callable[..., Any]:
    """paged_attention, guarded; with `advise`, a changed input in a course clause is given to it as advice."""

    @functools.wraps(paged_attention)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        given = {**dict(zip(ARRAY_ARGUMENTS, args)), **{k: v for k, v in kwargs.items() if k in ARRAY_ARGUMENTS}}
        before = {name: to_numpy(value).copy() for name, value in given.items() if _is_array(value)}
        output = paged_attention(*args, **kwargs)
        for name, snapshot in before.items():
            if not same_array(given[name], snapshot):
                message = f"paged_attention changed its input {name} in place; every input must be left as it was given"
                if advise is None or not IN_COURSE_CLAUSE.get():
                    raise InputMutationError(message)
                advise(f"{message} (the course fails it only where its own later reads see it)")
        if not _is_array(output):
            raise OutputTypeError(
                f"paged_attention returned a {type(output).__name__}, not an array: its output must be computed "
                "during the call and returned as an MLX or NumPy array"
            )
        return output

    return guarded
