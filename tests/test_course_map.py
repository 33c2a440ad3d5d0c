"""The suite against the course's own Day 3/4 tests: no false alarm on a course-conformant subject, no course clause unchecked.

One run of the whole suite on tests/subjects/course_conformant.py (a subject
written from the course's public tests, float32/bfloat16 only, the course's
messages) in a child process, the way tests/test_mutants.py runs it, feeds
every test here: it must pass with float16 reported unsupported, every check
must carry its relation to the course, every course test about the API must
have a check, and invariants/COURSE_MAP.md must say exactly that. Where
../shared/course/ is present, invariants/course.py is held to the course's
files.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pagecheck.invariants.catalog import INVARIANTS
from pagecheck.invariants.course import (
    BEYOND_COURSE_MARK, CLAUSE_SCOPES, COURSE_FILES, COURSE_MARK, COURSE_TESTS, INVALID_METADATA, INVALID_METADATA_CASES,
    OUTSIDE_THE_API, course_scope,
)
from pagecheck.invariants.dtype_support import UNSUPPORTED_DTYPE
from tests.test_mutants import run_suite

ROOT = Path(__file__).resolve().parent.parent
COURSE_DIR = ROOT.parent / "shared" / "course"
SUBJECT = ROOT / "tests" / "subjects" / "course_conformant.py"
COURSE_MAP = ROOT / "invariants" / "COURSE_MAP.md"


@pytest.fixture(scope="module")
def course_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    results = tmp_path_factory.mktemp("course") / "results.json"
    return run_suite(str(SUBJECT), [], results)


def _function(nodeid: str) -> str:
    """pagecheck.invariants.test_x::test_y[params] (a results check id) -> test_x.py::test_y"""
    module, _, name = nodeid.split("[", 1)[0].partition("::")
    return f"{module.rpartition('.')[2]}.py::{name}"


def test_the_course_conformant_subject_passes_the_whole_suite(course_run: dict[str, Any]) -> None:
    checks = course_run["checks"]
    bad = {c["nodeid"]: c["message"][:300] for c in checks if c["outcome"] in ("fail", "error")}
    assert not bad, f"the suite fails behaviour the course accepts: {bad}"
    passing = {c["invariant"] for c in checks if c["outcome"] == "pass"}
    assert passing == set(INVARIANTS), f"invariants with no passing check: {set(INVARIANTS) - passing}"


def test_float16_is_reported_unsupported_not_failed(course_run: dict[str, Any]) -> None:
    skipped = {c["nodeid"]: c["message"] for c in course_run["checks"] if c["outcome"] == "skip"}
    float16 = {c["nodeid"] for c in course_run["checks"] if "float16" in c["nodeid"] and "bfloat16" not in c["nodeid"]}
    assert float16, "the suite has no float16 checks"
    assert set(skipped) == float16, f"skipped {sorted(skipped)}, the float16 checks are {sorted(float16)}"
    wrong = {n: m for n, m in skipped.items() if not m.startswith(f"{UNSUPPORTED_DTYPE} float16")}
    assert not wrong, f"skip reasons that do not start with {UNSUPPORTED_DTYPE!r}: {wrong}"


def test_every_check_is_mapped_or_beyond_the_course(course_run: dict[str, Any]) -> None:
    for check in course_run["checks"]:
        scope, tests = check["scope"], check["course_tests"]
        assert scope in (COURSE_MARK, BEYOND_COURSE_MARK), f"{check['nodeid']} has scope {scope!r}"
        assert bool(tests) == (scope == COURSE_MARK), f"{check['nodeid']}: scope {scope} with course tests {tests}"
        assert set(tests) <= set(COURSE_TESTS), f"{check['nodeid']} maps to unknown course tests {tests}"


def test_every_course_test_about_the_api_has_a_check(course_run: dict[str, Any]) -> None:
    mapped = {test for check in course_run["checks"] for test in check["course_tests"]}
    assert set(COURSE_TESTS) - mapped == set(), f"course tests no check maps: {sorted(set(COURSE_TESTS) - mapped)}"


def test_the_clause_table_says_which_scopes_each_invariant_has(course_run: dict[str, Any]) -> None:
    """Grades score an invariant's course checks and its checks beyond the course apart, from CLAUSE_SCOPES."""
    found: dict[str, set[str]] = {}
    for check in course_run["checks"]:
        found.setdefault(check["invariant"], set()).add(check["scope"])
    assert {i: set(s) for i, s in CLAUSE_SCOPES.items()} == found
    assert list(CLAUSE_SCOPES) == list(INVARIANTS)

def _course_map_tables() -> tuple[set[tuple[str, str, str]], set[tuple[str, str]]]:
    """(course test, check, invariant) rows and (check, invariant) beyond-course rows of COURSE_MAP.md."""
    mapped: set[tuple[str, str, str]] = set()
    beyond: set[tuple[str, str]] = set()
    section = ""
    for line in COURSE_MAP.read_text().splitlines():
        if line.startswith("## "):
            section = line
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.startswith("| `") else []
        if not cells:
            continue
        if section.startswith("## Course test"):
            course_test = cells[0].strip("`")
            for check, invariant in re.findall(r"`([\w.]+::\w+)` \((\w+)\)", cells[2]):
                mapped.add((course_test, check, invariant))
        elif section.startswith("## Beyond"):
            beyond.add((cells[0].strip("`"), cells[1]))
    return mapped, beyond


def test_the_course_map_says_what_the_marks_say(course_run: dict[str, Any]) -> None:
    want_mapped = {
        (test, _function(c["nodeid"]), c["invariant"]) for c in course_run["checks"] for test in c["course_tests"]
    }
    want_beyond = {
        (_function(c["nodeid"]), c["invariant"]) for c in course_run["checks"] if c["scope"] == BEYOND_COURSE_MARK
    }
    mapped, beyond = _course_map_tables()
    assert mapped == want_mapped, f"COURSE_MAP.md lacks {want_mapped - mapped}, has extra {mapped - want_mapped}"
    assert beyond == want_beyond, f"COURSE_MAP.md lacks {want_beyond - beyond}, has extra {beyond - want_beyond}"


def _course_file_tests(path: Path) -> dict[str, dict[str, list[str]]]:
    """The test functions of one course file, each with its parametrize decorators' ids by argument names."""
    tests: dict[str, dict[str, list[str]]] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            tests[node.name] = {}
            for decorator in node.decorator_list:
                keywords = {k.arg: k.value for k in getattr(decorator, "keywords", [])}
                if "ids" in keywords and getattr(decorator, "args", None):
                    tests[node.name][str(ast.literal_eval(decorator.args[0]))] = ast.literal_eval(keywords["ids"])
    return tests


def test_the_course_lists_match_the_course_files() -> None:
    if not COURSE_DIR.is_dir():
        pytest.skip(f"{COURSE_DIR} (the course's own tests) is not here")
    listed = {test.split("[", 1)[0] for test in (*COURSE_TESTS, *OUTSIDE_THE_API)}
    found = {f"{name}::{test}" for name in COURSE_FILES for test in _course_file_tests(COURSE_DIR / name)}
    assert listed == found, f"course tests not listed: {found - listed}; listed but gone: {listed - found}"
    assert not set(COURSE_TESTS) & set(OUTSIDE_THE_API)
    metadata_file, metadata_test = INVALID_METADATA.split("::")
    parametrized = _course_file_tests(COURSE_DIR / metadata_file)[metadata_test]
    cases = next(ids for argnames, ids in parametrized.items() if "message" in argnames)
    assert tuple(cases) == INVALID_METADATA_CASES, f"the course's invalid-metadata cases are {cases}"


def _item(*marks: tuple[str, tuple[str, ...]]) -> Any:
    """A stand-in for a pytest item with the given (mark name, args)."""
    return SimpleNamespace(
        nodeid="invariants/test_x.py::test_y",
        iter_markers=lambda name: [SimpleNamespace(args=args) for mark, args in marks if mark == name],
    )


def test_collection_refuses_a_check_without_exactly_one_relation_to_the_course() -> None:
    some_test = next(iter(COURSE_TESTS))
    assert course_scope(_item((COURSE_MARK, (some_test,)))) == [("scope", COURSE_MARK), ("course", some_test)]
    assert course_scope(_item((BEYOND_COURSE_MARK, ()))) == [("scope", BEYOND_COURSE_MARK)]
    for marks in ((), ((COURSE_MARK, (some_test,)), (BEYOND_COURSE_MARK, ())), ((COURSE_MARK, ("day_9.py::test_z",)),)):
        with pytest.raises(ValueError):
            course_scope(_item(*marks))
