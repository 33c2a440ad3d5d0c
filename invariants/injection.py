"""What a check puts in place of a subject's method, or of mx.eval, to make a call fail or to watch it.

The course's own tests do this with monkeypatch. This module imports only the
standard library: the grading worker runs this very source beside the subject
(worker_process.WORKER_MODULES), so a check gets the same behaviour whether
the subject runs in process or in a sandboxed worker. invariants/calls.py
chooses where each one is installed.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, Callable

GATHER_REFUSED = "materialize() must not gather dense K/V"


class FailingCall:
    """In a method's place: counts its calls (`calls`) and raises RuntimeError(message) at call number `at` instead
    of calling through; every other call goes through."""

    def __init__(self, original: Callable[..., Any], at: int, message: str) -> None:
        self.original, self.at, self.message, self.calls = original, at, message, 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls == self.at:
            raise RuntimeError(self.message)
        return self.original(*args, **kwargs)


class ResultIdentity:
    """target.NAME() called once now: `same()` calls it again and says whether that call returned the very object
    the first one did, as the course's `cache.block_table() is first` asks. Identity does not cross a pipe, so a
    sandboxed subject's probe lives in its worker, next to the object."""

    def __init__(self, target: Any, name: str) -> None:
        self.target, self.name = target, name
        self.first = getattr(target, name)()

    def same(self) -> bool:
        return getattr(self.target, self.name)() is self.first


def install_failing_call(target: Any, name: str, at: int, message: str) -> FailingCall:
    """Put a FailingCall around target.NAME, in its place; the wrapper."""
    wrapper = FailingCall(getattr(target, name), at, message)
    setattr(target, name, wrapper)
    return wrapper


def _shape(value: Any) -> list[int] | str:
    try:
        return [int(n) for n in value.shape]
    except Exception:
        return type(value).__name__[:80]


def watch_materialize(cache: Any, mx: ModuleType) -> dict[str, Any]:
    """Call cache.materialize() with cache.gather_dense refusing (AssertionError) and mx.eval only recording
    what it is given, as the course's materialize test does; both are put back afterwards. An exception from
    materialize() propagates unless a gather was refused first. Returns plain data: {"gathers": calls to
    gather_dense, "escaped": whether a refused gather's error left materialize() (as in the course's test, which
    then fails), "evals": for each mx.eval call, the shape of each argument (its type's name where it has
    none)}."""
    gathers: list[int] = []
    evals: list[list[Any]] = []
    escaped = False

    def refuse(*args: Any, **kwargs: Any) -> Any:
        gathers.append(1)
        raise AssertionError(GATHER_REFUSED)

    def record(*arrays: Any) -> None:
        evals.append([_shape(a) for a in arrays])

    own = vars(cache) if hasattr(cache, "__dict__") else {}
    had, before = "gather_dense" in own, own.get("gather_dense")
    real_eval = mx.eval
    cache.gather_dense = refuse
    mx.eval = record
    try:
        cache.materialize()
    except BaseException:
        if not gathers:
            raise  # materialize's own failure; a refused gather is reported below instead
        escaped = True
    finally:
        mx.eval = real_eval
        if had:
            cache.gather_dense = before
        else:
            try:
                del cache.gather_dense
            except AttributeError:
                pass
    return {"gathers": len(gathers), "escaped": escaped, "evals": evals}
