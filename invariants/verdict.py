"""How a check says no: one exception type, and messages that name the invariant, the layout and the worst error."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from pagecheck.invariants.calls import attention_output
from pagecheck.reference.arrays import to_numpy
from pagecheck.reference.layouts import PagedLayout
from pagecheck.reference.tolerance import Comparison, compare


# The user_properties key of advice: a remark on a passing behaviour (a message that names no field),
# recorded through the suite's `advise` fixture and carried into the results, never a failure.
ADVICE_PROPERTY = "advice"


class InvariantViolation(AssertionError):
    """A subject broke an invariant; the message starts with the invariant's id in brackets."""

    def __init__(self, invariant: str, message: str) -> None:
        super().__init__(f"[{invariant}] {message}")
        self.invariant = invariant


def expect(condition: bool, invariant: str, message: str, layout: PagedLayout | None = None) -> None:
    if not condition:
        where = f"\n  layout: {layout.describe()}" if layout is not None else ""
        raise InvariantViolation(invariant, message + where)


def expect_close(
    invariant: str, what: str, got: Any, want: Any, layout: PagedLayout, dtype: str | None = None
) -> Comparison:
    """Compare under the tolerance of `dtype` (default: the layout's); fail with layout and worst error."""
    result = compare(got, want, dtype or layout.dtype)
    if not result.passed:
        raise InvariantViolation(invariant, f"{what}\n  layout: {layout.describe()}\n  worst: {result.summary()}")
    return result


def same_array(a: Any, b: Any) -> bool:
    """Bitwise-equal values (NaN equal to NaN), shape and dtype."""
    x, y = to_numpy(a), to_numpy(b)
    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    if np.issubdtype(x.dtype, np.floating):
        return bool(np.array_equal(x, y, equal_nan=True))
    return bool(np.array_equal(x, y))


def expect_value_error(invariant: str, what: str, call: Callable[[], object], contains: str | None = None) -> str:
    """Run `call`, which must raise ValueError (mentioning `contains`, if given); return the message."""
    try:
        call()
    except ValueError as exc:
        message = str(exc)
        if contains is not None and contains.lower() not in message.lower():
            raise InvariantViolation(invariant, f"{what}: ValueError without {contains!r}: {message!r}") from None
        return message
    raise InvariantViolation(invariant, f"{what}: no ValueError was raised")


def expect_reference(
    invariant: str, what: str, paged_attention: Callable[..., Any], layout: PagedLayout, scale: float | None = None
) -> Comparison:
    """The subject's output for `layout` must match the float64 reference within the layout dtype's tolerance."""
    return expect_close(
        invariant, what, attention_output(paged_attention, layout, scale), layout.reference_output(scale), layout
    )
