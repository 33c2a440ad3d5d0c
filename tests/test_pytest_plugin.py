"""The suite's pytest11 plugin: it runs from any directory by --pyargs, costs other runs nothing, and a
subject that cannot be checked is a usage error."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pagecheck.invariants.runner import check_id, rerun_command

ROOT = Path(__file__).resolve().parent.parent
MUTANT = ROOT / "tests" / "mutants" / "context_plus_one.py"
RUN_LIMIT_S = 300
USAGE_ERROR = 4


def pytest_in(directory: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    """`python -m pytest ARGS` run in `directory`, which is neither the checkout nor on sys.path."""
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", *arguments]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(command, cwd=directory, env=env, capture_output=True, text=True, timeout=RUN_LIMIT_S)


def failure_messages(junit: Path) -> dict[str, str]:
    """Each check that did not pass, by name, with its message, from a --junitxml report (a crashed xdist worker is
    written as an error). The terminal's text wraps and repeats messages by its width, so counts are read here."""
    cases = ET.parse(junit).getroot().iter("testcase")
    return {case.get("name", ""): bad.get("message", "") for case in cases for bad in case if bad.tag in ("failure", "error")}


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    return folder


def test_the_suite_runs_by_pyargs_from_any_directory(elsewhere: Path) -> None:
    subject = elsewhere / "subject.py"
    subject.write_text("from pagecheck.reference.subject import TinyKvPagedPool, TinyKvPagedCache, paged_attention\n")
    done = pytest_in(elsewhere, "-q", "--pyargs", "pagecheck.invariants", "--pagecheck-subject", str(subject),
                     "--pagecheck-invariant", "lazy_tail", "--pagecheck-invariant", "gqa_mapping")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " passed" in done.stdout and "failed" not in done.stdout


def test_a_mutant_fails_by_pyargs_from_any_directory(elsewhere: Path) -> None:
    done = pytest_in(elsewhere, "-q", "-x", "--pyargs", "pagecheck.invariants", "--pagecheck-subject", str(MUTANT),
                     "--pagecheck-invariant", "context_len")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "1 failed" in done.stdout


@pytest.mark.parametrize("case", ["missing file", "exposes nothing", "raises on import"])
def test_a_subject_that_cannot_be_checked_is_a_one_line_usage_error(elsewhere: Path, case: str) -> None:
    subject = elsewhere / "subject.py"
    if case == "exposes nothing":
        subject.write_text("import math\n")
    elif case == "raises on import":
        subject.write_text("raise RuntimeError('broken on purpose')\n")
    done = pytest_in(elsewhere, "-q", "--pyargs", "pagecheck.invariants", "--pagecheck-subject", str(subject))
    assert done.returncode == USAGE_ERROR, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and "subject" in errors[0], done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("seed", ["-4", str(2**64)])
def test_a_seed_out_of_range_is_a_one_line_usage_error(elsewhere: Path, seed: str) -> None:
    done = pytest_in(elsewhere, "-q", "--pyargs", "pagecheck.invariants", "--pagecheck-seed", seed)
    assert done.returncode == USAGE_ERROR, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR:")]
    assert errors == [f"ERROR: --pagecheck-seed={seed} must be in 0..2**64-1 (NumPy's and MLX's seeds)"], done.stderr


HANGS = """
from {module} import *  # noqa: F403
import {module} as _base


def _attend_forever(*args):
    {before}
    while True:
        pass


_base._attend = _attend_forever
"""
TWO_CHECKS = "test_any_group_size_matches_the_reference or test_query_heads_read_their_groups_kv_head[1-2]"


def hanging_subject(folder: Path, before: str = "pass") -> Path:
    """The course-conformant subject whose attention never returns, with `before` run first in the call."""
    shutil.copy(ROOT / "tests" / "subjects" / "course_conformant.py", folder / "conformant_base.py")
    subject = folder / "hangs.py"
    subject.write_text(HANGS.format(module="conformant_base", before=before))
    return subject


def test_a_check_that_never_returns_fails_at_the_time_limit_and_the_run_goes_on(elsewhere: Path) -> None:
    subject = hanging_subject(elsewhere)
    started = time.monotonic()
    done = pytest_in(elsewhere, "-q", "--pyargs", "pagecheck.invariants", "--pagecheck-subject", str(subject),
                     "--pagecheck-invariant", "gqa_mapping", "-k", TWO_CHECKS, "--pagecheck-check-timeout", "1",
                     f"--junitxml={elsewhere / 'junit.xml'}")  # fmt: skip
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    failed = failure_messages(elsewhere / "junit.xml")
    assert len(failed) == 2, failed
    assert all("the check ran past --pagecheck-check-timeout 1 s" in message for message in failed.values()), failed
    assert time.monotonic() - started < RUN_LIMIT_S / 2


def test_a_check_stuck_where_no_alarm_reaches_ends_its_worker_not_the_run(elsewhere: Path) -> None:
    """SIGALRM ignored (as native code that never returns to Python never runs its handler): the second stage ends the
    xdist worker, xdist fails the check, and the next check runs in a new worker."""
    subject = hanging_subject(elsewhere, "import signal; signal.signal(signal.SIGALRM, signal.SIG_IGN)")
    done = pytest_in(elsewhere, "-q", "-n", "1", "--pyargs", "pagecheck.invariants", "--pagecheck-subject",
                     str(subject), "--pagecheck-invariant", "gqa_mapping", "-k", TWO_CHECKS,
                     "--pagecheck-check-timeout", "1", f"--junitxml={elsewhere / 'junit.xml'}")  # fmt: skip
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    failed = failure_messages(elsewhere / "junit.xml")
    assert len(failed) == 2, failed
    assert all("crashed while running" in message for message in failed.values()), failed


@pytest.mark.parametrize("value", ["-1", "inf", "nan", "1e-300"])
def test_a_check_timeout_out_of_range_is_a_usage_error(elsewhere: Path, value: str) -> None:
    done = pytest_in(elsewhere, "-q", "--pyargs", "pagecheck.invariants", "--pagecheck-check-timeout", value)
    assert done.returncode == USAGE_ERROR and "--pagecheck-check-timeout" in done.stderr, done.stderr


def test_other_pytest_runs_load_nothing_of_the_suite(elsewhere: Path) -> None:
    (elsewhere / "test_plain.py").write_text(
        "import sys\n"
        "def test_nothing_heavy_was_imported():\n"
        "    heavy = [m for m in ('mlx', 'mlx.core', 'numpy', 'hypothesis', 'pagecheck.invariants.subject')\n"
        "             if m in sys.modules]\n"
        "    assert heavy == []\n"
    )
    done = pytest_in(elsewhere, "-q", "-p", "no:xdist", "-p", "no:hypothesispytest", "test_plain.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def test_the_plugin_adds_only_prefixed_options(elsewhere: Path) -> None:
    done = pytest_in(elsewhere, "--help")
    assert done.returncode == 0
    section = done.stdout.split("pagecheck invariants suite:", 1)[1].split("\n\n", 1)[0]
    options = [line.split()[0].split("=")[0] for line in section.splitlines() if line.strip().startswith("--")]
    assert options and all(option.startswith("--pagecheck-") for option in options), options
    assert "--pagecheck-subject" in options and "--pagecheck-device" in options


def test_check_ids_do_not_depend_on_the_rootdir() -> None:
    want = "pagecheck.invariants.test_lazy_tail::test_x[1-2]"
    assert check_id("invariants/test_lazy_tail.py::test_x[1-2]") == want
    assert check_id("../venv/lib/python3.11/site-packages/pagecheck/invariants/test_lazy_tail.py::test_x[1-2]") == want
    assert check_id("tests/test_other.py::test_y") == "tests/test_other.py::test_y"


def test_a_rerun_command_reproduces_its_failure_in_another_directory(tmp_path: Path, elsewhere: Path) -> None:
    results = tmp_path / "results.json"
    first = pytest_in(elsewhere, "-q", "-x", "--pyargs", "pagecheck.invariants", "--pagecheck-subject",
                      os.path.relpath(MUTANT, elsewhere), "--pagecheck-invariant", "context_len",
                      "--pagecheck-results", str(results))
    assert first.returncode == 1, first.stdout[-3000:]
    import json

    failed = [c for c in json.loads(results.read_text())["checks"] if c["outcome"] == "fail"]
    assert failed and failed[0]["nodeid"].startswith("pagecheck.invariants.test_context_len::")
    # The command names the subject by its absolute path, so it means the same anywhere (a relative spec is
    # relative to the process that builds the command, as a report's is to the report's).
    command = rerun_command(failed[0]["nodeid"], subject=os.path.relpath(MUTANT), seed=20240901)
    assert str(MUTANT) in command
    other = tmp_path / "other"
    other.mkdir()
    arguments = shlex.split(command)[3:]  # after "python -m pytest"
    done = pytest_in(other, *arguments, "-p", "no:xdist")
    assert done.returncode == 1 and "1 failed" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]


def test_the_suite_runs_beside_a_plugin_that_takes_the_plain_option_names(elsewhere: Path) -> None:
    # pytest-playwright, for one, defines --device; pagecheck's options never collide with such names.
    (elsewhere / "other_plugin.py").write_text(
        "def pytest_addoption(parser):\n"
        "    parser.addoption('--device', default='x')\n"
        "    parser.addoption('--subject', default='y')\n"
    )
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "other_plugin", "-q", "--pyargs",
               "pagecheck.invariants", "--pagecheck-subject", "reference", "--pagecheck-invariant", "gqa_mapping",
               "--device", "pixel"]
    env = dict(os.environ, PYTHONPATH=str(elsewhere))
    done = subprocess.run(command, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=RUN_LIMIT_S)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " passed" in done.stdout


def test_the_suite_command_carries_the_check_timeout(tmp_path: Path) -> None:
    from pagecheck.invariants.runner import SuiteRequest

    request = SuiteRequest("impl", "cpu", 1, "default", 0, tmp_path / "r.json", check_timeout_s=600.0)
    assert request.command()[-2:] == ["--pagecheck-check-timeout", "600"]
    assert "--pagecheck-check-timeout" not in SuiteRequest("impl", "cpu", 1, "default", 0, tmp_path / "r.json").command()
    with pytest.raises(ValueError, match="check_timeout=-1"):
        SuiteRequest("impl", "cpu", 1, "default", 0, tmp_path / "r.json", check_timeout_s=-1)


def test_progress_keeps_coming_while_the_suite_is_quiet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A check that runs for minutes prints nothing; the progress callback still runs every HEARTBEAT_S, so the
    report's clock moves."""
    from pagecheck.invariants import runner

    class Quiet(runner.SuiteRequest):
        def command(self) -> list[str]:
            return [sys.executable, "-c", "import time; print('..', flush=True); time.sleep(1.5); print('. [100%]')"]

    monkeypatch.setattr(runner, "HEARTBEAT_S", 0.2)
    calls: list[tuple[dict[str, int], int | None]] = []
    run = runner.run_suite(Quiet("impl", "cpu", 1, "default", 0, tmp_path / "r.json"), tmp_path / "log",
                           lambda counts, percent: calls.append((dict(counts), percent)))  # fmt: skip
    assert run.returncode == 0 and run.counts["passed"] == 3
    quiet = [counts for counts, _ in calls if counts["passed"] == 2]
    assert len(quiet) >= 4, calls


def test_the_suite_run_keeps_hypothesis_files_out_of_the_current_folder(tmp_path: Path, monkeypatch) -> None:
    """`pagecheck report --out X` left a .hypothesis folder (Hypothesis's cache of the tests' constants) wherever
    it was run from."""
    from pagecheck.invariants import runner

    monkeypatch.chdir(tmp_path)
    request = runner.SuiteRequest("impl", "cpu", 1, "default", 0, tmp_path / "out" / "r.json", invariants=("context_len",))
    (tmp_path / "out").mkdir()
    run = runner.run_suite(request, tmp_path / "out" / "invariants.log")
    assert run.returncode == 0, (tmp_path / "out" / "invariants.log").read_text()[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.parametrize("where", ["a-folder", "missing/r.json"])
def test_a_results_path_that_cannot_take_the_file_is_a_usage_error(elsewhere: Path, where: str) -> None:
    (elsewhere / "a-folder").mkdir(exist_ok=True)
    done = pytest_in(elsewhere, "-q", "--pyargs", "pagecheck.invariants", "--pagecheck-invariant", "gqa_mapping",
                     "--pagecheck-results", str(elsewhere / where))
    assert done.returncode == USAGE_ERROR and "--pagecheck-results=" in done.stderr, done.stderr[-2000:]


def test_the_suite_run_resolves_a_module_subject_in_the_callers_folder_past_its_stdlib_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`pagecheck report` run from a folder holding a random.py crashed its suite stage: `python -m pytest` put
    that folder first on sys.path, and tempfile imported the student's random. The suite now runs elsewhere
    and the caller's folder is last on the path, where a module subject there still resolves."""
    from pagecheck.invariants import runner

    (tmp_path / "random.py").write_text("raise RuntimeError('the caller folder shadowed the standard library')\n")
    (tmp_path / "my_subject.py").write_text("from pagecheck.impl import *  # noqa: F403\n")
    (tmp_path / "out").mkdir()
    monkeypatch.chdir(tmp_path)
    request = runner.SuiteRequest("my_subject", "cpu", 1, "default", 0, Path("out/r.json"), invariants=("context_len",))
    run = runner.run_suite(request, tmp_path / "out" / "invariants.log")
    log = (tmp_path / "out" / "invariants.log").read_text()
    assert run.returncode == 0 and run.counts["passed"] > 0, log[-2000:]
    assert (tmp_path / "out" / "r.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my_subject.py", "out", "random.py"]


def test_a_subjects_own_keyboard_interrupt_fails_its_check_and_the_run_goes_on(elsewhere: Path) -> None:
    """A KeyboardInterrupt from the subject's second call ended the whole session ('!!! KeyboardInterrupt !!!'),
    as the user's Ctrl-C does, and the report read the suite as crashed."""
    (elsewhere / "interrupts.py").write_text(
        "from pagecheck.impl import *  # noqa: F403\nfrom pagecheck.impl import paged_attention as _real\n"
        "calls = []\n\n\ndef paged_attention(*args, **kwargs):\n    calls.append(1)\n"
        "    if len(calls) == 2:\n        raise KeyboardInterrupt\n    return _real(*args, **kwargs)\n"
    )  # fmt: skip
    done = pytest_in(elsewhere, "-q", "--pyargs", "pagecheck.invariants", "--pagecheck-subject", "interrupts.py",
                     "--pagecheck-invariant", "gqa_mapping", "--junitxml", str(elsewhere / "j.xml"))  # fmt: skip
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    failures = failure_messages(elsewhere / "j.xml")
    assert list(failures.values()) == ["Failed: the subject raised KeyboardInterrupt()"], failures
    assert "passed" in done.stdout.splitlines()[-1]


def test_a_subjects_keyboard_interrupt_fails_its_check_where_sigint_is_ignored(elsewhere: Path) -> None:
    """A run started in the background has SIGINT ignored, so the suite's own Ctrl-C handler is not installed:
    there the subject's KeyboardInterrupt ended the whole session (seen in a backgrounded fresh-clone run). With
    Ctrl-C ignored, no KeyboardInterrupt is the user's."""
    (elsewhere / "interrupts.py").write_text(
        "from pagecheck.impl import *  # noqa: F403\nfrom pagecheck.impl import paged_attention as _real\n"
        "calls = []\n\n\ndef paged_attention(*args, **kwargs):\n    calls.append(1)\n"
        "    if len(calls) == 2:\n        raise KeyboardInterrupt\n    return _real(*args, **kwargs)\n"
    )  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-q", "--pyargs",
         "pagecheck.invariants", "--pagecheck-subject", "interrupts.py", "--pagecheck-invariant", "gqa_mapping",
         "--junitxml", str(elsewhere / "j.xml")],
        cwd=elsewhere, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, capture_output=True,
        text=True, timeout=RUN_LIMIT_S, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )  # fmt: skip
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert list(failure_messages(elsewhere / "j.xml").values()) == ["Failed: the subject raised KeyboardInterrupt()"]
