"""The suite's fixtures: the subject's API names, the run's seed and a per-check generator.

The plugin (plugin.py) registers this module once a run asks for the suite and
the subject has loaded, so the fixtures cost other pytest runs nothing.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from pagecheck.invariants.calls import the_courses_own_mask, the_subjects_own_metadata
from pagecheck.invariants.plugin import SUBJECT_KEY
from pagecheck.invariants.subject import Subject
from pagecheck.invariants.verdict import ADVICE_PROPERTY


@pytest.fixture(scope="session")
def subject(pytestconfig: pytest.Config) -> Subject:
    return pytestconfig.stash[SUBJECT_KEY]


def _require(subject: Subject, name: str) -> object:
    if not subject.has(name):
        pytest.skip(f"subject {subject.spec} has no {name}: {subject.missing[name]}")
    return subject.get(name)


@pytest.fixture(scope="session")
def paged_attention(subject: Subject) -> object:
    return _require(subject, "paged_attention")


def by_keyword(cls: Callable[..., object], *names: str) -> Callable[..., object]:
    """`cls`, made from arguments given in order as the course's tests give them, by keyword
    (TinyKvPagedPool(page_size=4)): a constructor that takes them only by keyword is one the course accepts."""

    def make(*args: object) -> object:
        if len(args) > len(names):
            raise TypeError(f"{len(args)} arguments for {names}")
        return cls(**dict(zip(names, args)))

    make.__name__ = make.__qualname__ = getattr(cls, "__name__", "constructor")
    return make


# Each class the course's tests construct: its arguments in the order they give them, by keyword.
CONSTRUCTOR_ARGUMENTS = {
    "TinyKvPagedPool": ("page_size",), "TinyKvPagedCache": ("pool",),
    "BatchingKvCache": ("max_active_requests", "max_seq_len"),
}


def _constructor(subject: Subject, name: str) -> Callable[..., object]:
    """The subject's class `name` as the course's tests construct it (by_keyword); skipped where it has none."""
    return by_keyword(_require(subject, name), *CONSTRUCTOR_ARGUMENTS[name])


@pytest.fixture(scope="session")
def pool_type(subject: Subject) -> Callable[..., object]:
    return _constructor(subject, "TinyKvPagedPool")


@pytest.fixture(scope="session")
def cache_type(subject: Subject) -> Callable[..., object]:
    return _constructor(subject, "TinyKvPagedCache")


@pytest.fixture(scope="session")
def batching_cache_type(subject: Subject) -> Callable[..., object]:
    return _constructor(subject, "BatchingKvCache")


@pytest.fixture(scope="session")
def pagecheck_seed(pytestconfig: pytest.Config) -> int:
    return pytestconfig.getoption("pagecheck_seed")


@pytest.fixture
def rng(pagecheck_seed: int, request: pytest.FixtureRequest) -> np.random.Generator:
    """A generator for checks without Hypothesis: the run's seed, plus the check's own stream."""
    # Module name + test name, not the node id: the id holds the path from the
    # rootdir, which differs between a checkout and an installed copy.
    check_id = f"{request.node.module.__name__}::{request.node.name}"
    return np.random.default_rng([pagecheck_seed, zlib.crc32(check_id.encode())])


@pytest.fixture
def advise(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Record advice on the running check (say, a message that names no field): shown in results, never failed."""

    def record(text: str) -> None:
        request.node.user_properties.append((ADVICE_PROPERTY, text))

    return record


@pytest.fixture(scope="session")
def own_metadata(subject: Subject) -> Callable[[Any], Any]:
    """layout -> the metadata the subject's own caches hand out once the layout's tokens are written through them
    (calls.the_subjects_own_metadata): for course checks over layouts of their own, which call as the course's
    attention tests do, over a cache's metadata and its own mask. Where the caches refuse to write the layout (a
    layout may still ask of them what the course never does), the mask they hand out at the course's own call of
    its kind, when it is no array (calls.CachesRefused, calls.the_courses_own_mask): the checks call over the
    layout with that mask, as an attention that takes only its caches' mask is called in the course. None where
    the subject has no cache to ask or its caches serve neither: the checks call over the layout with "causal",
    so an attention written before its caches is still judged."""

    def ask(layout: Any) -> Any:
        if not (subject.has("TinyKvPagedPool") and subject.has("TinyKvPagedCache")):
            return None
        types = (
            _constructor(subject, "TinyKvPagedPool"), _constructor(subject, "TinyKvPagedCache"),
            _constructor(subject, "BatchingKvCache") if subject.has("BatchingKvCache") else None,
        )
        try:
            return the_subjects_own_metadata(*types, layout)
        except Exception:  # noqa: BLE001 - caches that refuse the layout, or cannot serve (an unwritten Day 3)
            return the_courses_own_mask(*types, layout)

    return ask
