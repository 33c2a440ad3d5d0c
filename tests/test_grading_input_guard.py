"""The grading guard around a subject's paged_attention: inputs left as given, and an array returned."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from pagecheck.grading.input_guard import InputMutationError, OutputTypeError, guard_inputs
from pagecheck.invariants.course import IN_COURSE_CLAUSE


class Lazy:
    """Stands for a handle to an object in the worker: reading it would run the subject's code after the call."""

    def __len__(self) -> int:
        return 1

    def __getitem__(self, index: int) -> np.ndarray:
        return np.zeros((1, 1, 4))


@pytest.mark.parametrize("output", [np.zeros((1, 1, 1, 4)), mx.zeros((1, 1, 1, 4))], ids=["numpy", "mlx"])
def test_an_array_output_passes(output: object) -> None:
    assert guard_inputs(lambda *args, **kwargs: output)(mx.zeros((1, 1, 1, 4))) is output


@pytest.mark.parametrize("output", [Lazy(), [np.zeros((1, 1, 4))], None], ids=["lazy object", "list", "none"])
def test_an_output_that_is_not_an_array_fails_the_call(output: object) -> None:
    with pytest.raises(OutputTypeError, match="not an array"):
        guard_inputs(lambda *args, **kwargs: output)(mx.zeros((1, 1, 1, 4)))


def test_a_changed_input_still_fails_first() -> None:
    def clamps(query: np.ndarray) -> object:
        query[...] = 0
        return Lazy()

    with pytest.raises(InputMutationError):
        guard_inputs(clamps)(np.ones((1, 1, 1, 4)))


def _clamps(query: np.ndarray) -> np.ndarray:
    query[...] = 0
    return query.copy()


def test_a_changed_input_is_advice_in_a_course_clause_and_fails_beyond() -> None:
    """The course fails a change only where its own later reads see it, which the clause's reads judge; beyond the
    course, inputs_unchanged fails any."""
    advice: list[str] = []
    guarded = guard_inputs(_clamps, advice.append)
    with pytest.raises(InputMutationError, match="changed its input query in place"):
        guarded(np.ones((1, 1, 1, 4)))
    token = IN_COURSE_CLAUSE.set(True)
    try:
        query = np.ones((1, 1, 1, 4))
        assert guarded(query).shape == (1, 1, 1, 4) and not query.any()
        with pytest.raises(InputMutationError):
            guard_inputs(_clamps)(np.ones((1, 1, 1, 4)))  # no one to advise: a failure still
    finally:
        IN_COURSE_CLAUSE.reset(token)
    assert len(advice) == 1 and "changed its input query in place" in advice[0]
