"""How a check says no: one exception type, and messages that name the invariant, the layout and the worst error."""

from __future__ import annotations

import math
import re
from typing import Any, Callable

import numpy as np

from pagecheck.invariants.calls import attention_output
from pagecheck.invariants.course import IN_COURSE_CLAUSE
from pagecheck.reference.attention import dense_attention, gather_request
from pagecheck.reference.arrays import to_numpy
from pagecheck.reference.layouts import PagedLayout
from pagecheck.reference.tolerance import COURSE_ALLCLOSE, Comparison, compare


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
    """Compare under the tolerance of `dtype` (default: the layout's; in a course clause, the course's); fail with
    layout and worst error."""
    result = compare(got, want, dtype or layout.dtype, course=IN_COURSE_CLAUSE.get())
    if not result.passed:
        raise InvariantViolation(invariant, f"{what}\n  layout: {layout.describe()}\n  worst: {result.summary()}")
    return result


def expect_pages_hold(invariant: str, what: str, layout: PagedLayout, written: dict[int, Any]) -> None:
    """Each row of a cache's metadata holds, in its own pages read through its own block table, the
    tokens written to that row's cache (`written`: row -> a record with float64 `keys` and `values`
    [H_kv, T, D] and the `dtype` they were written in; rows with no tokens are left out), within that dtype's
    tolerance, so a pool that stores what it was given passes however it copies it.

    A check that compares the subject's attention over its metadata with the oracle over the tokens written
    proves nothing about the pages by itself: an attention that recognises the metadata and reads a private
    dense copy of the tokens passes it with pages that were never written. Read by the oracle, the pages
    cannot be forged that way.

    In a course clause the pages may also be laid out [P, H_kv, D, page_size] (keys as K^T for the QK^T
    product, say), and hold the tokens times one nonzero factor (keys with the softmax scale folded in, say),
    each of keys and values on its own: the course pins their shape only where page_size equals D (its pages
    of 4 at head dim 4), and reads what they hold only through the subject's own attention.
    """
    course = IN_COURSE_CLAUSE.get()
    pools = (to_numpy(layout.key_pages, np.float64), to_numpy(layout.value_pages, np.float64))
    for row, record in written.items():
        n = int(record.keys.shape[1])
        try:
            ids = np.asarray(layout.block_table[row])
            live = ids[: -(-n // layout.page_size)] if n else ids[:0]
            held = (
                int(layout.context_lens[row]) == n and bool((live >= 0).all())
                and all(
                    any(_holds(gather_request(laid_out, ids, n, layout.page_size), want, record.dtype, course)
                        for laid_out in _page_layouts(pages, layout.page_size, want.shape[-1], course))
                    for pages, want in zip(pools, (record.keys, record.values))
                )
            )  # fmt: skip
        except (IndexError, ValueError):
            held = False
        expect(
            held, invariant,
            f"{what}: row {row}'s pages, read through its block table, do not hold the {n} tokens written to it",
            layout,
        )


def _holds(read: np.ndarray, want: np.ndarray, dtype: str, course: bool) -> bool:
    """Whether the tokens read from pages are `want` within `dtype`'s tolerance; in a course clause also as `want`
    times one nonzero factor (its least-squares fit), which the subject's attention divides out."""
    if compare(read, want, dtype, course=course).passed:
        return True
    norm = float(np.sum(want * want))
    if not course or not norm:
        return False
    factor = float(np.sum(read * want)) / norm
    return math.isfinite(factor) and factor != 0.0 and compare(read / factor, want, dtype, course=course).passed


def _page_layouts(pages: np.ndarray, page_size: int, head_dim: int, course: bool) -> list[np.ndarray]:
    """`pages` read as [P, H_kv, page_size, D]: as they are where their last two axes fit that, and in a course
    clause also with those two axes swapped where they are [D, page_size] (both where the two are equal)."""
    found = [pages] if pages.ndim == 4 and pages.shape[2:] == (page_size, head_dim) else []
    if course and pages.ndim == 4 and pages.shape[2:] == (head_dim, page_size):
        found.append(pages.swapaxes(2, 3))
    return found or [pages]


def gathered(invariant: str, cache: Any) -> tuple[np.ndarray, np.ndarray]:
    """A cache's gather_dense() as float64 [1, H_kv, T, D] each (any leading axes of one dropped, as the course's
    dense attention broadcasts them), read when the course's test reads it. Each must be an array: the course's
    dense attention reads their shapes (expect_arrays)."""
    keys, values = cache.gather_dense()
    expect_arrays(invariant, "gather_dense()", keys, values)
    keys, values = to_numpy(keys, np.float64), to_numpy(values, np.float64)
    return keys.reshape((1, *keys.shape[-3:])), values.reshape((1, *values.shape[-3:]))


def expect_close_to_its_gather(invariant: str, what: str, got: Any, query: np.ndarray,
                               tokens: tuple[np.ndarray, np.ndarray], layout: PagedLayout) -> None:  # fmt: skip
    """A request's causal attention output against attention over its own cache's gather_dense() (`tokens`, from
    `gathered`): what each of the course's attention tests takes for its expected output, so a cache whose
    gather_dense() differs from the pages it attends over (stale, or failing in the dtype) fails here as there."""
    expect_close(invariant, f"{what} vs attention over the cache's gather_dense()", got,
                 dense_attention(query, *tokens, mask="causal"), layout)  # fmt: skip


def same_tokens(got: Any, want: np.ndarray, dtype: str = "float32") -> bool:
    """Tokens read back from a cache (`got`) are the ones written (`want`, float64): the same shape, and equal
    beyond the course; in a course clause within the course's tolerance, as its asserts compare a cache's
    gather_dense() and update_and_fetch() with assert_allclose (a pool may keep keys in another form and undo it
    on the way out): its rtol and atol, with no attention between to allow for (COURSE_ALLCLOSE)."""
    values = to_numpy(got, np.float64)
    if values.shape != want.shape:
        return False
    if not IN_COURSE_CLAUSE.get():
        return bool(np.array_equal(values, want))
    rtol, atol = COURSE_ALLCLOSE[dtype]
    return bool(np.allclose(values, want, rtol=rtol, atol=atol))


def same_array(a: Any, b: Any) -> bool:
    """Bitwise-equal values (NaN equal to NaN), shape and dtype."""
    x, y = to_numpy(a), to_numpy(b)
    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    if np.issubdtype(x.dtype, np.floating):
        return bool(np.array_equal(x, y, equal_nan=True))
    return bool(np.array_equal(x, y))


def expect_gathered_tokens(invariant: str, what: str, cache: Any, record: Any) -> None:
    """A cache's tokens read through its gather_dense() (gathered) are the ones `record` (a WrittenKv) holds."""
    keys, values = gathered(invariant, cache)
    expect(
        same_tokens(keys[0], record.keys) and same_tokens(values[0], record.values), invariant,
        f"{what}: the tokens read through gather_dense() differ from the ones written",
    )


def raised_message(exc: BaseException) -> str:
    """An exception's message with its notes (PEP 678) on lines of their own, as pytest.raises(match=...) reads it."""
    return "\n".join([str(exc), *(note for note in getattr(exc, "__notes__", ()) if isinstance(note, str))])


def expect_value_error(invariant: str, what: str, call: Callable[[], object], contains: str | None = None) -> str:
    """Run `call`, which must raise ValueError (mentioning `contains`, if given); return the message, with the
    exception's notes (PEP 678) on lines of their own, as pytest.raises(match=...) reads it (raised_message)."""
    try:
        call()
    except ValueError as exc:
        message = raised_message(exc)
        if contains is not None and contains.lower() not in message.lower():
            raise InvariantViolation(invariant, f"{what}: ValueError without {contains!r}: {message!r}") from None
        return message
    raise InvariantViolation(invariant, f"{what}: no ValueError was raised")


def expect_arrays(invariant: str, what: str, *values: Any) -> None:
    """Each of `values` must be an array (MLX or NumPy): the course's assert_allclose reads a result's dtype
    before anything else, so a list or a tuple of numbers fails there however right its numbers are."""
    import mlx.core as mx

    kinds = [type(v).__name__ for v in values if not isinstance(v, (mx.array, np.ndarray))]
    expect(not kinds, invariant, f"{what}: returned {', '.join(kinds)} where the course reads an array's dtype")


def expect_course_phrase(invariant: str, what: str, phrase: str, message: str) -> None:
    """A ValueError's `message` must hold the course's `phrase` as its test matches it (pytest.raises(match=...):
    re.search, case as written): for course cases that send exactly the course's inputs."""
    expect(
        re.search(phrase, message) is not None, invariant,
        f"{what}: the ValueError {message!r} lacks the course's phrase {phrase!r} (its test matches it)",
    )


def expect_reference(
    invariant: str, what: str, paged_attention: Callable[..., Any], layout: PagedLayout, scale: float | None = None
) -> Comparison:
    """The subject's output for `layout` must match the float64 reference within the layout dtype's tolerance."""
    return expect_close(
        invariant, what, attention_output(paged_attention, layout, scale), layout.reference_output(scale), layout
    )
