"""The course's own Week 3 Day 3/4 tests, run through tests/course_shim.py against pagecheck subjects.

Skipped where the course folder (../shared/course, or $PAGECHECK_COURSE_DIR) is absent.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.course_shim import DESELECTED, CourseFolderMissing, course_dir, run_course_tests

# The course's two files hold 52 tests (parametrized cases counted); 8 are outside pagecheck's API.
APPLICABLE_COURSE_TESTS = 44
DESELECTED_COURSE_TESTS = 8
STARTER = "skeleton"


@pytest.fixture(scope="module")
def course() -> Path:
    try:
        return course_dir()
    except CourseFolderMissing as exc:
        pytest.skip(str(exc))


def test_the_deselected_list_is_the_course_tests_outside_the_api() -> None:
    assert len(DESELECTED) == DESELECTED_COURSE_TESTS


def test_impl_passes_every_applicable_course_test(course: Path, tmp_path: Path) -> None:
    run = run_course_tests(course, "impl", tmp_path)
    failures = "\n".join(f"{test}: {message}" for test, message in sorted(run.messages.items()))
    assert run.counts() == {
        "passed": APPLICABLE_COURSE_TESTS,
        "failed": 0,
        "skipped": 0,
        "deselected": DESELECTED_COURSE_TESTS,
    }, failures or run.log
    assert sorted(run.deselected) == sorted(DESELECTED)


def test_the_untouched_starter_fails_every_applicable_course_test_naming_the_stub(
    course: Path, tmp_path: Path
) -> None:
    checkout = tmp_path / "tiny-llm"
    shutil.copytree(course / STARTER, checkout)
    scratch = tmp_path / "run"
    scratch.mkdir()
    run = run_course_tests(course, f"tiny-llm:{checkout}", scratch)
    assert run.counts() == {
        "passed": 0,
        "failed": APPLICABLE_COURSE_TESTS,
        "skipped": 0,
        "deselected": DESELECTED_COURSE_TESTS,
    }, run.log
    unexplained = {test: text for test, text in run.messages.items() if " not implemented " not in text}
    assert not unexplained
