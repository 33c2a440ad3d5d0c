"""invariants/dtype_support.py: a subject may decline float16 cleanly, never float32 or bfloat16, and never sloppily."""

from __future__ import annotations

from typing import Any, Callable

import pytest

from pagecheck.invariants.calls import ATTENTION_ARGUMENTS
from pagecheck.invariants.dtype_support import UNSUPPORTED_DTYPE, names_dtype, require_dtype
from pagecheck.invariants.verdict import InvariantViolation
from pagecheck.reference.subject import paged_attention as reference_attention


def _declining(dtypes: tuple[str, ...], error: type[Exception], message: str) -> Callable[..., Any]:
    """A paged_attention that raises `error(message)` for `dtypes` and computes the rest."""

    def paged_attention(*args: Any, **options: Any) -> Any:
        inputs = dict(zip(ATTENTION_ARGUMENTS, args), **options)
        if str(inputs["query"].dtype).rsplit(".", 1)[-1] in dtypes:
            raise error(message)
        return reference_attention(**inputs)

    return paged_attention


@pytest.mark.parametrize("error", [ValueError, TypeError, NotImplementedError])
def test_declining_float16_by_name_skips_as_unsupported(error: type[Exception]) -> None:
    subject = _declining(("float16",), error, "paged attention supports float32 or bfloat16, got float16")
    with pytest.raises(pytest.skip.Exception, match=f"^{UNSUPPORTED_DTYPE} float16: "):
        require_dtype(subject, "float16", "dtypes")
    require_dtype(subject, "float32", "dtypes")
    require_dtype(subject, "bfloat16", "dtypes")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_declining_a_required_dtype_fails(dtype: str) -> None:
    subject = _declining((dtype,), ValueError, f"{dtype} is not supported")
    with pytest.raises(InvariantViolation, match=r"^\[dtypes\] .* which is required"):
        require_dtype(subject, dtype, "dtypes")


def test_declining_without_naming_the_dtype_fails() -> None:
    # "bfloat16" in the message does not name float16.
    subject = _declining(("float16",), ValueError, "this kernel supports float32 or bfloat16")
    with pytest.raises(InvariantViolation, match="must name it"):
        require_dtype(subject, "float16", "softmax_stability")


def test_declining_after_changing_an_input_fails() -> None:
    def scribbles_then_declines(query: Any, *args: Any, **options: Any) -> Any:
        query[...] = 0
        raise ValueError("float16 is not supported")

    with pytest.raises(InvariantViolation, match=r"changed the inputs \['query'\]"):
        require_dtype(scribbles_then_declines, "float16", "inputs_unchanged")


def test_an_error_outside_the_three_types_is_no_decline() -> None:
    subject = _declining(("float16",), RuntimeError, "float16 kernel crashed")
    with pytest.raises(RuntimeError):
        require_dtype(subject, "float16", "dtypes")


def test_names_dtype_reads_words() -> None:
    assert names_dtype("got mlx.core.float16", "float16")
    assert names_dtype("dtype=float16,", "float16")
    assert not names_dtype("float32 or bfloat16 only", "float16")
    assert not names_dtype("float16x2", "float16")
