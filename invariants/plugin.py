"""The invariants suite's pytest plugin, registered under the `pytest11` entry point.

    pytest -n auto --pyargs pagecheck.invariants --pagecheck-subject SPEC
           [--pagecheck-device cpu|gpu] [--pagecheck-seed N]
           [--pagecheck-profile default|thorough] [--pagecheck-results PATH]
           [--pagecheck-invariant ID ...] [--pagecheck-check-timeout S]

Installed with pagecheck, it is loaded by every pytest run, so it costs
nothing until a run asks for the suite: it adds only `--pagecheck-*` options
and imports neither MLX nor Hypothesis nor the subject at import time. A run
asks for the suite when it collects the suite's folder (a path in or above
it, or `--pyargs pagecheck.invariants...`) or names a subject; then the
subject is loaded once, before collection, and a spec that does not load, or
a subject that exposes none of the API names, is a usage error (exit 4).

The seed feeds Hypothesis (every strategy draws its NumPy seed from it) and
the `rng` fixture, so one seed reproduces a run exactly.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
import threading
from pathlib import Path

import pytest

from pagecheck.invariants.catalog import INVARIANTS
from pagecheck.invariants.course import BEYOND_COURSE_MARK, COURSE_MARK, IN_COURSE_CLAUSE, course_scope, REPLAY_MARK
from pagecheck.invariants.profiles import DEFAULT_PROFILE, DEFAULT_SEED, PROFILES

SUITE_DIR = Path(__file__).resolve().parent
SUITE_PACKAGE = __name__.rpartition(".")[0]  # pagecheck.invariants
FIXTURES_PLUGIN = f"{SUITE_PACKAGE}.fixtures"
DEFAULT_SUBJECT = "impl"
DEVICES = ("cpu", "gpu")
SUBJECT_KEY = pytest.StashKey[object]()  # the loaded Subject (pagecheck.invariants.subject)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("pagecheck", "pagecheck invariants suite")
    group.addoption(
        "--pagecheck-subject",
        default=None,
        metavar="SPEC",
        help="what to check: impl, reference, a dotted module name, a path to a .py file or a package folder, or tiny-llm:PATH "
        f"(default: {DEFAULT_SUBJECT})",
    )
    group.addoption(
        "--pagecheck-device", default="cpu", choices=DEVICES, help="MLX default device for the suite (default: cpu)"
    )
    group.addoption(
        "--pagecheck-seed", type=int, default=DEFAULT_SEED, help=f"seed for every random draw (default: {DEFAULT_SEED})"
    )
    group.addoption(
        "--pagecheck-profile", default=DEFAULT_PROFILE, choices=sorted(PROFILES), help="Hypothesis search depth"
    )
    group.addoption("--pagecheck-results", default=None, metavar="PATH", help="write per-check results JSON here")
    group.addoption(
        "--pagecheck-check-timeout",
        type=float,
        default=0.0,
        metavar="S",
        help="fail a check that runs past S seconds, so a subject that never returns holds one check, not the "
        "run (invariants/check_timeout.py); 0: no limit (default)",
    )
    group.addoption(
        "--pagecheck-invariant",
        action="append",
        default=[],
        choices=sorted(INVARIANTS),
        metavar="ID",
        help="run only the checks of this invariant (repeatable)",
    )


def _argument_path(config: pytest.Config, argument: str) -> Path | None:
    """The file or folder a command-line argument collects, without importing it."""
    target = argument.split("::", 1)[0]
    if config.option.pyargs and target and "/" not in target and not target.endswith(".py"):
        try:
            spec = importlib.util.find_spec(target)
        except (ImportError, ValueError):
            spec = None
        if spec is not None:
            if spec.submodule_search_locations:
                return Path(next(iter(spec.submodule_search_locations))).resolve()
            if spec.origin:
                return Path(spec.origin).resolve()
    return (config.invocation_params.dir / target).resolve()


def suite_requested(config: pytest.Config) -> bool:
    """Whether this run collects the suite or names a subject."""
    if config.getoption("pagecheck_subject") is not None:
        return True
    for argument in config.args:
        path = _argument_path(config, argument)
        if path is None:
            continue
        if path == SUITE_DIR or SUITE_DIR in path.parents:
            return True
        # A folder above the suite collects it, unless the suite is installed inside an environment
        # (pytest does not descend into virtual environments or site-packages).
        if path in SUITE_DIR.parents and "site-packages" not in SUITE_DIR.relative_to(path).parts:
            return True
    return False


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "invariant(name): the seed invariant or contract clause a check guards")
    config.addinivalue_line("markers", f"{COURSE_MARK}(*ids): the course tests whose behaviour a check checks")
    config.addinivalue_line("markers", f"{BEYOND_COURSE_MARK}: a check of a behaviour no course test checks")
    config.addinivalue_line("markers", f"{REPLAY_MARK}: a course check that replays one of the course's data points "
                            "as the course builds and reads it")
    if not suite_requested(config):
        return
    # Before mlx is imported: float32 matmuls in full float32, not MLX's default TF32 on CUDA (the float32
    # tolerance is derived from float32's precision).
    os.environ.setdefault("MLX_ENABLE_TF32", "0")
    from pagecheck.invariants.profiles import load_profile, register_profiles
    from pagecheck.invariants.subject import SubjectError, load_subject

    register_profiles()
    load_profile(config.getoption("pagecheck_profile"))
    from pagecheck.invariants.check_timeout import check_timeout_error

    problem = check_timeout_error(config.getoption("pagecheck_check_timeout"))
    if problem is not None:
        raise pytest.UsageError(f"--pagecheck-check-timeout={problem}")
    seed = config.getoption("pagecheck_seed")
    if not 0 <= seed < 2**64:
        raise pytest.UsageError(f"--pagecheck-seed={seed} must be in 0..2**64-1 (NumPy's and MLX's seeds)")
    # Runs before Hypothesis's own pytest_configure, which reads this option.
    if getattr(config.option, "hypothesis_seed", None) is None:
        config.option.hypothesis_seed = config.getoption("pagecheck_seed")
    spec = config.getoption("pagecheck_subject") or DEFAULT_SUBJECT
    from pagecheck.invariants.runner import SUBJECT_FOLDER_ENV
    from pagecheck.invariants.subject import raise_user_interrupt

    # Ctrl-C raises UserInterrupt, so that a KeyboardInterrupt the subject raises fails its check instead of
    # ending the session (pytest_runtest_call).
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, raise_user_interrupt)
        config.add_cleanup(lambda: signal.signal(signal.SIGINT, signal.default_int_handler))  # an in-process run

    # run_suite starts pytest outside the caller's folder; a module subject there resolves, after the rest.
    folder = os.environ.get(SUBJECT_FOLDER_ENV)
    if folder and folder not in sys.path:
        sys.path.append(folder)
    try:
        subject = load_subject(spec)
    except SubjectError as exc:
        raise pytest.UsageError(str(exc)) from exc
    config.stash[SUBJECT_KEY] = subject
    seconds = config.getoption("pagecheck_check_timeout") or 0.0
    if subject.call_time_limit is not None and seconds > 0:
        subject.call_time_limit(seconds)  # its calls cross a pipe: bounded there, not by the alarm (runtest_call)
    device = config.getoption("pagecheck_device")
    if device == "cpu" or _gpu_available():
        import mlx.core as mx

        # Said in both directions: MLX built with a GPU back-end (CUDA, Metal) starts on the GPU, so "cpu" left
        # alone ran the suite on the GPU there.
        mx.set_default_device(mx.gpu if device == "gpu" else mx.cpu)
    config.pluginmanager.import_plugin(FIXTURES_PLUGIN)
    results = config.getoption("pagecheck_results")
    if results and not hasattr(config, "workerinput"):
        from pagecheck.invariants.results import ResultsCollector

        target = Path(results)
        # Checked before any check runs: a folder there failed the run at its end, with a traceback.
        if target.exists() and not target.is_file():
            raise pytest.UsageError(f"--pagecheck-results={results!r} exists and is not a file")
        if not target.resolve().parent.is_dir():
            raise pytest.UsageError(f"--pagecheck-results={results!r}: its folder does not exist")

        config.pluginmanager.register(ResultsCollector(Path(results).resolve(), _run_info(config)), "pagecheck-results")


def _gpu_available() -> bool:
    import mlx.core as mx

    return bool(mx.is_available(mx.gpu))


def _run_info(config: pytest.Config) -> dict[str, object]:
    return {
        "subject": config.getoption("pagecheck_subject") or DEFAULT_SUBJECT,
        "seed": config.getoption("pagecheck_seed"),
        "profile": config.getoption("pagecheck_profile"),
        "device": config.getoption("pagecheck_device"),
        "invariants": dict(INVARIANTS),
    }


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    if SUBJECT_KEY not in item.config.stash:  # not a run of the suite
        yield
        return
    from pagecheck.invariants.check_timeout import CheckTimedOut, time_limit
    from pagecheck.invariants.subject import is_user_interrupt

    seconds = item.config.getoption("pagecheck_check_timeout", 0.0) or 0.0
    if item.config.stash[SUBJECT_KEY].call_time_limit is not None:
        seconds = 0.0  # each call has the limit where it runs (pytest_configure)
    in_course = IN_COURSE_CLAUSE.set(item.get_closest_marker(COURSE_MARK) is not None)
    try:
        with time_limit(seconds):
            outcome = yield
    finally:
        IN_COURSE_CLAUSE.reset(in_course)
    error = outcome.excinfo[1] if outcome.excinfo else None
    if isinstance(error, CheckTimedOut):
        outcome.force_exception(pytest.fail.Exception(str(error), pytrace=False))
    elif isinstance(error, KeyboardInterrupt) and not is_user_interrupt(error):
        # The subject's own KeyboardInterrupt is its failure here, not the end of the run.
        outcome.force_exception(pytest.fail.Exception(f"the subject raised {error!r}", pytrace=False))


def pytest_report_header(config: pytest.Config) -> list[str]:
    if SUBJECT_KEY not in config.stash:
        return []
    return [
        config.stash[SUBJECT_KEY].describe(),
        f"pagecheck: seed={config.getoption('pagecheck_seed')} profile={config.getoption('pagecheck_profile')} "
        f"device={config.getoption('pagecheck_device')}",
    ]


def _invariant_of(item: pytest.Item) -> str:
    marks = list(item.iter_markers("invariant"))
    if len(marks) != 1 or len(marks[0].args) != 1 or marks[0].args[0] not in INVARIANTS:
        raise pytest.UsageError(
            f"{item.nodeid} must carry exactly one @pytest.mark.invariant(<id>) with an id from "
            f"{SUITE_PACKAGE}.catalog"
        )
    return marks[0].args[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if SUBJECT_KEY not in config.stash:
        return
    wanted = set(config.getoption("pagecheck_invariant"))
    gpu_missing = config.getoption("pagecheck_device") == "gpu" and not _gpu_available()
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
            item.add_marker(pytest.mark.skip(reason="--pagecheck-device gpu: MLX reports no GPU on this machine"))
        keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
