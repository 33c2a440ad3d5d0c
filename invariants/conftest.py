"""The invariants suite's options, fixtures and collection rules.

    pytest invariants --subject SPEC --device cpu|gpu --pagecheck-seed N
                      --pagecheck-profile default|thorough --pagecheck-results PATH
                      --pagecheck-invariant ID (repeatable: run only those invariants)

The seed feeds Hypothesis (every strategy draws its NumPy seed from it) and
the `rng` fixture, so one seed reproduces a run exactly.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

# Before mlx is imported: float32 matmuls in full float32, not MLX's default TF32 on CUDA (the float32
# tolerance is derived from float32's precision; tests/conftest.py says more).
os.environ.setdefault("MLX_ENABLE_TF32", "0")

from invariants.catalog import INVARIANTS  # noqa: E402
from invariants.course import BEYOND_COURSE_MARK, COURSE_MARK, course_scope  # noqa: E402
from invariants.profiles import DEFAULT_PROFILE, DEFAULT_SEED, PROFILES, load_profile, register_profiles  # noqa: E402
from invariants.verdict import ADVICE_PROPERTY  # noqa: E402
from pagecheck.results import ResultsCollector  # noqa: E402
from pagecheck.subject import SPEC_HELP, Subject, SubjectError, load_subject  # noqa: E402

SUITE_DIR = Path(__file__).resolve().parent
SUBJECT_KEY = pytest.StashKey[Subject]()
DEVICES = ("cpu", "gpu")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("pagecheck", "pagecheck invariants")
    group.addoption("--subject", default="impl", help=f"what to check: {SPEC_HELP} (default: impl)")
    group.addoption("--device", default="cpu", choices=DEVICES, help="MLX default device (default: cpu)")
    group.addoption(
        "--pagecheck-seed", type=int, default=DEFAULT_SEED, help=f"seed for every random draw (default: {DEFAULT_SEED})"
    )
    group.addoption(
        "--pagecheck-profile", default=DEFAULT_PROFILE, choices=sorted(PROFILES), help="Hypothesis search depth"
    )
    group.addoption("--pagecheck-results", default=None, metavar="PATH", help="write per-check results JSON here")
    group.addoption(
        "--pagecheck-invariant",
        action="append",
        default=[],
        choices=sorted(INVARIANTS),
        metavar="ID",
        help="run only the checks of this invariant (repeatable)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # Registered here too, for runs of an installed copy that see no pyproject.toml.
    config.addinivalue_line("markers", "invariant(name): the seed invariant or contract clause a check guards")
    config.addinivalue_line("markers", f"{COURSE_MARK}(*ids): the course tests whose behaviour a check checks")
    config.addinivalue_line("markers", f"{BEYOND_COURSE_MARK}: a check of a behaviour no course test checks")
    register_profiles()
    load_profile(config.getoption("pagecheck_profile"))
    # Runs before Hypothesis's own pytest_configure, which reads this option.
    if getattr(config.option, "hypothesis_seed", None) is None:
        config.option.hypothesis_seed = config.getoption("pagecheck_seed")
    try:
        config.stash[SUBJECT_KEY] = load_subject(config.getoption("subject"))
    except SubjectError as exc:
        raise pytest.UsageError(str(exc)) from exc
    if config.getoption("device") == "gpu" and _gpu_available():
        import mlx.core as mx

        mx.set_default_device(mx.gpu)
    results = config.getoption("pagecheck_results")
    if results and not hasattr(config, "workerinput"):
        config.pluginmanager.register(ResultsCollector(Path(results).resolve(), _run_info(config)), "pagecheck-results")


def _gpu_available() -> bool:
    import mlx.core as mx

    return bool(mx.is_available(mx.gpu))


def _run_info(config: pytest.Config) -> dict[str, object]:
    return {
        "subject": config.getoption("subject"),
        "seed": config.getoption("pagecheck_seed"),
        "profile": config.getoption("pagecheck_profile"),
        "device": config.getoption("device"),
        "invariants": dict(INVARIANTS),
    }


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [
        config.stash[SUBJECT_KEY].describe(),
        f"pagecheck: seed={config.getoption('pagecheck_seed')} profile={config.getoption('pagecheck_profile')} "
        f"device={config.getoption('device')}",
    ]


def _invariant_of(item: pytest.Item) -> str:
    marks = list(item.iter_markers("invariant"))
    if len(marks) != 1 or len(marks[0].args) != 1 or marks[0].args[0] not in INVARIANTS:
        raise pytest.UsageError(
            f"{item.nodeid} must carry exactly one @pytest.mark.invariant(<id>) with an id from invariants/catalog.py"
        )
    return marks[0].args[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    wanted = set(config.getoption("pagecheck_invariant"))
    gpu_missing = config.getoption("device") == "gpu" and not _gpu_available()
    keep, drop = [], []
    for item in items:
        if not item.path.is_relative_to(SUITE_DIR):
            keep.append(item)
            continue
        invariant = _invariant_of(item)
        if wanted and invariant not in wanted:
            drop.append(item)
            continue
        item.user_properties.append(("invariant", invariant))
        try:
            item.user_properties.extend(course_scope(item))
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from exc
        if gpu_missing:
            item.add_marker(pytest.mark.skip(reason="--device gpu: MLX reports no GPU on this machine"))
        keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


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


@pytest.fixture(scope="session")
def pool_type(subject: Subject) -> type:
    return _require(subject, "TinyKvPagedPool")


@pytest.fixture(scope="session")
def cache_type(subject: Subject) -> type:
    return _require(subject, "TinyKvPagedCache")


@pytest.fixture(scope="session")
def batching_cache_type(subject: Subject) -> type:
    return _require(subject, "BatchingKvCache")


@pytest.fixture
def advise(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Record advice on the running check (say, a message that names no field): shown in results, never failed."""

    def record(text: str) -> None:
        request.node.user_properties.append((ADVICE_PROPERTY, text))

    return record


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
