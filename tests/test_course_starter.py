"""The course's untouched starter (../shared/course/skeleton, a fresh clone's files) as a subject and graded.

A copy is loaded with `tiny-llm:PATH` while `mlx_lm` cannot be imported, and graded end to end by
`pagecheck grade`: its extension builds, every check fails naming the stub it reached, the run finishes.
A copy with a learner's Day 4 CPU path (tests/data/starter_learner/) is graded too, to show that the
grader builds the checkout's extension, imports the module it built and runs its eval_cpu.
Skipped where the course folder is absent; the two grades build the extension (a minute each on two
cores) and are marked slow.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pagecheck.invariants.neutral_skips import is_neutral_skip

from pagecheck.invariants.subject import API_METHODS, API_NAMES, load_subject
from tests.course_shim import configured_course_dir

ROOT = Path(__file__).resolve().parent.parent
LEARNER = ROOT / "tests" / "data" / "starter_learner"
STARTER_NAME = "skeleton"
SECRET = "course-starter-secret-5b2e9a"
GRADE_LIMIT_S = 900
# The starter implements BatchingKvCache.__init__ and nothing else of the API.
STARTER_STUBS = frozenset(
    {"paged_attention"}
    | {f"{cls}.{member}" for cls, members in API_METHODS.items() for member in members}
    - {"BatchingKvCache.__init__"}  # written in the starter
    - {"TinyKvPagedCache.materialize"}  # an empty body may be right there (EMPTY_ALLOWED)
)
NOT_IMPLEMENTED = re.compile(r"NotImplementedError: (\S+) not implemented \(its body at src/tiny_llm/\S+ is a stub\)")


@pytest.fixture(scope="module")
def starter() -> Path:
    folder = configured_course_dir() / STARTER_NAME
    if not (folder / "src" / "tiny_llm" / "__init__.py").is_file():
        pytest.skip(f"the course's starter is not in {folder}")
    return folder


def writable_copy(source: Path, target: Path) -> Path:
    """Copy a checkout (the course folder is read-only) so that the copy can be built and edited."""
    shutil.copytree(source, target)
    for directory, _, files in os.walk(target):
        for name in [".", *files]:
            path = Path(directory) / name
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
    return target



def test_the_starter_loads_without_its_course_only_dependencies(
    starter: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_imports: None
) -> None:
    checkout = writable_copy(starter, tmp_path / "tiny-llm")
    monkeypatch.setitem(sys.modules, "mlx_lm", None)  # importing it now raises ModuleNotFoundError
    subject = load_subject(f"tiny-llm:{checkout}")
    assert set(subject.names) == set(API_NAMES) and not subject.missing
    assert set(subject.stubs) == STARTER_STUBS
    assert "tiny_llm.batch" not in sys.modules  # the package __init__ (which imports it) did not run
    with pytest.raises(NotImplementedError, match=r"^TinyKvPagedPool\.__init__ not implemented"):
        subject.get("TinyKvPagedPool")(page_size=4)
    with pytest.raises(NotImplementedError, match=r"^paged_attention not implemented"):
        subject.get("paged_attention")(None, None, None, None, None, 4)
    batch = subject.get("BatchingKvCache")(max_active_requests=2, max_seq_len=8)  # implemented in the starter
    with pytest.raises(NotImplementedError, match=r"^BatchingKvCache\.add_request not implemented"):
        batch.add_request(None, 0)


def grade(checkout: Path, out: Path) -> dict[str, Any]:
    command = [sys.executable, "-m", "pagecheck.cli", "grade", str(checkout), "--out", str(out), "--jobs", "1",
               "--seed", SECRET]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=GRADE_LIMIT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((out / "results" / f"{checkout.name}.json").read_text())


def total_points(out: Path, name: str) -> int:
    with open(out / "grades.csv", newline="") as table:
        row = next(row for row in csv.DictReader(table) if row["submission"] == name)
    return int(row["total"])


@pytest.mark.slow
def test_the_untouched_starter_is_graded_to_a_finished_verdict_naming_each_stub(starter: Path, tmp_path: Path) -> None:
    checkout = writable_copy(starter, tmp_path / "tiny-llm")
    result = grade(checkout, tmp_path / "graded")
    assert result["build"]["ok"], result["build"]
    assert result["verdict"] == "ok", result["detail"]
    assert [p["kind"] for p in result["passes"]] == ["public", "hidden"]
    checks = result["checks"]
    assert checks and all(p["checks_run"] == len(checks) for p in result["passes"])
    named = set()
    for check in checks:
        if is_neutral_skip(check):  # an optional dtype the stub "declines": neither passed nor failed
            continue
        assert check["outcome"] == "fail", check
        found = NOT_IMPLEMENTED.search(check["message"])
        assert found is not None, check
        named.add(found.group(1))
    # The checks reach the pool's constructor or paged_attention first; both are starter stubs.
    assert named == {"TinyKvPagedPool.__init__", "paged_attention"}
    assert total_points(tmp_path / "graded", checkout.name) == 0


@pytest.mark.slow
def test_the_grader_runs_the_eval_cpu_the_checkout_builds(starter: Path, tmp_path: Path) -> None:
    checkout = writable_copy(starter, tmp_path / "learner")
    shutil.copyfile(LEARNER / "paged_attention.cpp", checkout / "src" / "extensions" / "src" / "paged_attention.cpp")
    with open(checkout / "src" / "tiny_llm" / "attention.py", "a") as attention:
        attention.write((LEARNER / "attention_day4.py.in").read_text())
    result = grade(checkout, tmp_path / "graded")
    assert result["build"]["ok"], result["build"]
    assert result["verdict"] == "ok", result["detail"]
    by_invariant: dict[str, list[dict[str, Any]]] = {}
    for check in result["checks"]:
        by_invariant.setdefault(check["invariant"], []).append(check)
    # Attention-only invariants: the learner's C++ computes every output they compare.
    for invariant in ("gqa_mapping", "head_dims", "softmax_stability"):
        assert by_invariant[invariant] and all(c["outcome"] == "pass" for c in by_invariant[invariant]), invariant
    # What fails is the unwritten Day 3 pool and cache, or validation the learner's op does not do.
    for check in result["checks"]:
        if check["outcome"] != "pass" and not is_neutral_skip(check):
            assert check["invariant"] == "rejection" or NOT_IMPLEMENTED.search(check["message"]), check
    assert total_points(tmp_path / "graded", checkout.name) > 0
