"""End to end: `pagecheck grade` on the fixture submissions (tests/grading_fixtures/ and three mutants).

The whole fixture set is graded once per test run, by whichever test asks
first (under xdist the workers share it through a lock file), with a reduced
set of invariants, short limits and two jobs. These are the slowest tests of
the repository: marked `slow`.
"""

from __future__ import annotations

import csv
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import xml.etree.ElementTree as ElementTree

import jsonschema
import pytest

from pagecheck.grading.class_overview import BROKEN_PLOT_FILE, POINTS_PLOT_FILE
from pagecheck.grading.outputs import write_outputs
from pagecheck.grading.results_store import load_all_results
from pagecheck.grading.rubric import load_rubric
from pagecheck.grading.seeds import hidden_seed
from pagecheck.grading.shards import shard_of

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "grading_fixtures"
MUTANTS = ROOT / "tests" / "mutants"
SECRET = "grading-fixtures-secret-7d1f"
INVARIANTS = ("release_once", "lazy_tail", "head_dims", "inputs_unchanged")
# Limits sized for a loaded 2-core machine: a finishing pass takes a few seconds.
RUBRIC = FIXTURES / "rubric.toml"
OPTIONS = ["--jobs", "2", "--timeout", "30", "--memory", "2", "--seed", SECRET, "--invariants", ",".join(INVARIANTS),
           "--rubric", str(RUBRIC)]  # fmt: skip
RUN_LIMIT_S = 300
SVG = "{http://www.w3.org/2000/svg}"


@dataclass(frozen=True)
class Expected:
    path: Path
    verdict: str
    held: frozenset[str]  # invariants that earn their points
    flags: frozenset[str] = frozenset()


ALL = frozenset(INVARIANTS)
CACHES = frozenset({"release_once", "lazy_tail"})
# Most fixtures are built from this project's code: flagged, not zeroed, by the fixture rubric.
OWN = frozenset({"project_import"})
SUBMISSIONS: dict[str, Expected] = {
    "correct": Expected(FIXTURES / "correct", "ok", ALL, OWN),
    "starter": Expected(FIXTURES / "starter", "ok", frozenset()),
    "needs_extension": Expected(FIXTURES / "needs_extension", "build-failed", frozenset()),
    "segfault": Expected(FIXTURES / "segfault.py", "crashed (SIGSEGV)", frozenset(), OWN),
    "hang": Expected(FIXTURES / "hang.py", "timed-out", frozenset(), OWN),
    "hoard": Expected(FIXTURES / "hoard.py", "out-of-memory", frozenset(), OWN),
    # Its attention fails where SDPA is trapped, and the findings set its total to 0.
    "calls_sdpa": Expected(FIXTURES / "calls_sdpa.py", "ok", CACHES, OWN | {"sdpa_call", "dense_gather", "sdpa_trap"}),
    # inputs_unchanged passes but needs head_dims (see the rubric), which these break.
    "context_minus_one": Expected(MUTANTS / "context_minus_one.py", "ok", CACHES, OWN),
    "page_order_reversed": Expected(MUTANTS / "page_order_reversed.py", "ok", CACHES, OWN),
    # Grading checks the inputs of every call, so its clamping fails the head_dims checks too.
    "block_table_clamped_in_place": Expected(MUTANTS / "block_table_clamped_in_place.py", "ok", CACHES, OWN),
}
# Graded again with an interruption: two that take a while and one that is quick.
INTERRUPTED = ("context_minus_one", "correct", "segfault")


def grade(paths: list[Path], out: Path, *extra: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pagecheck.cli", "grade", *map(str, paths), "--out", str(out), *OPTIONS, *extra]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=RUN_LIMIT_S)
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="session")
def graded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """OUT of one uninterrupted grading run of every fixture submission."""
    paths = [e.path for e in SUBMISSIONS.values()]
    if "PYTEST_XDIST_WORKER" not in os.environ:
        out = tmp_path_factory.mktemp("graded")
        grade(paths, out)
        return out
    shared = tmp_path_factory.getbasetemp().parent  # one directory for all workers of this run
    out = shared / "graded"
    with open(shared / "graded.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "grades.csv").exists():
            grade(paths, out)
    return out


def scoreboard_rows(out: Path) -> dict[str, dict[str, str]]:
    with open(out / "grades.csv", newline="") as file:
        return {row["submission"]: row for row in csv.DictReader(file)}


def test_every_fixture_gets_its_verdict_and_points(graded: Path) -> None:
    rubric = load_rubric(RUBRIC)
    rows = scoreboard_rows(graded)
    assert sorted(rows) == sorted(SUBMISSIONS)
    for name, expected in SUBMISSIONS.items():
        row = rows[name]
        assert row["verdict"] == expected.verdict, f"{name}: {row}"
        held = {i for i in INVARIANTS if float(row[i]) == rubric.points_for(i)}
        assert held == set(expected.held), f"{name}: {row}"
        assert set(row["flags"].split()) == set(expected.flags), f"{name}: {row}"
        total = 0.0 if rubric.zeroes_total(set(expected.flags)) else sum(rubric.points_for(i) for i in expected.held)
        assert float(row["total"]) == total, f"{name}: {row}"


def test_grades_md_opens_with_a_class_overview_of_the_gallery(graded: Path) -> None:
    page = (graded / "grades.md").read_text()
    assert page.startswith("# Grades") and page.index("## Class overview") < page.index("| submission |")
    finished = [name for name, e in SUBMISSIONS.items() if e.verdict == "ok"]
    rows = [line.strip("| ").split(" | ") for line in page.splitlines() if line.startswith("| ") and line.endswith("% |")]
    assert sorted(row[0] for row in rows) == sorted(INVARIANTS)
    shares = [int(row[3].rstrip("%")) for row in rows]
    assert shares == sorted(shares, reverse=True)  # most-broken first
    by_invariant = {row[0]: (int(row[1]), int(row[2])) for row in rows}
    # Every finished fixture runs release_once's and head_dims' checks; only the starter breaks release_once,
    # and only the correct checkout keeps head_dims.
    assert by_invariant["release_once"] == (1, len(finished))
    assert by_invariant["head_dims"] == (len(finished) - 1, len(finished))
    unfinished = [name for name, e in SUBMISSIONS.items() if e.verdict != "ok"]
    assert all(name in page.split("| invariant |")[0] for name in unfinished)
    histogram = ElementTree.parse(graded / POINTS_PLOT_FILE).getroot()
    counts = [int(e.find(f"{SVG}title").text.split(": ")[1]) for e in histogram.iter() if e.get("class") == "bar"]
    assert sum(counts) == len(SUBMISSIONS)
    shares = ElementTree.parse(graded / BROKEN_PLOT_FILE).getroot()
    assert len([e for e in shares.iter() if e.get("class") == "bar"]) == len(INVARIANTS)


def test_results_follow_their_schema(graded: Path) -> None:
    schema = json.loads((ROOT / "reports" / "schema" / "grade.schema.json").read_text())
    for document in load_all_results(graded):
        jsonschema.Draft202012Validator(schema).validate(document)


def test_every_call_is_checked_for_changed_inputs(graded: Path) -> None:
    results = {d["name"]: d for d in load_all_results(graded)}
    failed = {c["invariant"] for c in results["block_table_clamped_in_place"]["checks"]
              if "changed its input block_table" in c["message"]}  # fmt: skip
    assert failed == {"head_dims", "inputs_unchanged"}


def test_run_problems_name_the_check_that_was_running(graded: Path) -> None:
    results = {d["name"]: d for d in load_all_results(graded)}
    for name in ("segfault", "hang", "hoard"):
        assert results[name]["running_check"], name
        feedback = (graded / "feedback" / f"{name}.md").read_text()
        assert results[name]["running_check"].split("::", 1)[-1] in feedback
    assert "MemoryError" in results["hoard"]["detail"]
    assert "does not load" in results["needs_extension"]["detail"]
    assert (graded / "logs" / "needs_extension" / "build.log").read_text().count("error") > 0


def test_student_files_never_show_the_secret(graded: Path) -> None:
    hidden = [str(hidden_seed(SECRET, name)) for name in SUBMISSIONS]
    for path in [*sorted((graded / "feedback").glob("*.md")), graded / "grades.md", graded / "grades.csv"]:
        text = path.read_text()
        assert SECRET not in text, path
        assert not any(seed in text for seed in hidden), path
    # The hidden pass did run, with the hidden seed, for every submission whose public pass finished.
    results = {d["name"]: d for d in load_all_results(graded)}
    assert [p["seed"] for p in results["correct"]["passes"]] == [20240901, hidden_seed(SECRET, "correct")]


def test_feedback_command_reproduces_the_failure(graded: Path, tmp_path: Path) -> None:
    # A failure only the grading plugin shows: the call changed its inputs, the output was right.
    name = "block_table_clamped_in_place"
    feedback = (graded / "feedback" / f"{name}.md").read_text()
    commands = re.findall(r"^    (\S+ -m pytest .*test_head_dims.*--pagecheck-seed \d+.*)$", feedback, flags=re.MULTILINE)
    assert commands, feedback
    # Pasted as written, in a directory that has nothing to do with the checkout or the submission.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    command = commands[0] + " -p no:xdist"
    # `python` is this environment's, as in a shell where it is activated.
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run(command, shell=True, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=RUN_LIMIT_S)
    assert done.returncode == 1 and "1 failed" in done.stdout, done.stdout + done.stderr
    assert "changed its input block_table" in done.stdout


def test_rerun_reuses_every_finished_result(graded: Path) -> None:
    before = {name: (graded / name).read_bytes() for name in ("grades.md", "grades.csv")}
    done = grade([e.path for e in SUBMISSIONS.values()], graded)
    assert f"0 to grade, {len(SUBMISSIONS)} finished earlier" in done.stderr
    assert {name: (graded / name).read_bytes() for name in before} == before


def test_merged_shards_reproduce_the_scoreboard(graded: Path, tmp_path: Path) -> None:
    for document in load_all_results(graded):
        shard = tmp_path / f"shard{shard_of(document['name'], 2)}" / "results"
        shard.mkdir(parents=True, exist_ok=True)
        shutil.copy(graded / "results" / f"{document['name']}.json", shard)
    merged = tmp_path / "merged"
    command = [sys.executable, "-m", "pagecheck.cli", "grade", "merge", str(tmp_path / "shard1"), str(tmp_path / "shard2"),
               "--out", str(merged), "--rubric", str(RUBRIC)]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=RUN_LIMIT_S)
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("grades.md", "grades.csv", POINTS_PLOT_FILE, BROKEN_PLOT_FILE):
        assert (merged / name).read_bytes() == (graded / name).read_bytes()


def _grader_children(out: Path) -> list[int]:
    """Processes still running with this output directory on their command line."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if str(out).encode() in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


def test_interrupted_run_resumes_to_the_same_scoreboard(graded: Path, tmp_path: Path) -> None:
    """Kill the grader (SIGKILL) after its first result, rerun: the same bytes as an uninterrupted run."""
    paths = [SUBMISSIONS[name].path for name in INTERRUPTED]
    out = tmp_path / "interrupted"
    command = [sys.executable, "-m", "pagecheck.cli", "grade", *map(str, paths), "--out", str(out), *OPTIONS]
    grader = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while grader.poll() is None and not list((out / "results").glob("*.json")):
            time.sleep(0.1)
    finally:
        grader.send_signal(signal.SIGKILL)
        grader.wait()
    finished_before_kill = len(list((out / "results").glob("*.json")))
    assert 1 <= finished_before_kill < len(INTERRUPTED), "the kill did not land midway"
    if sys.platform.startswith("linux"):  # children die with the grader (PR_SET_PDEATHSIG)
        for _ in range(100):
            if not _grader_children(out):
                break
            time.sleep(0.1)
        assert not _grader_children(out)

    done = grade(paths, out.relative_to(tmp_path), cwd=tmp_path)  # a relative --out works too
    assert f"{len(INTERRUPTED) - finished_before_kill} to grade, {finished_before_kill} finished earlier" in done.stderr

    baseline = tmp_path / "baseline"
    (baseline / "results").mkdir(parents=True)
    for name in INTERRUPTED:
        shutil.copy(graded / "results" / f"{name}.json", baseline / "results")
    write_outputs(baseline, load_rubric(RUBRIC))
    for name in ("grades.md", "grades.csv", *(f"feedback/{n}.md" for n in INTERRUPTED)):
        assert (out / name).read_bytes() == (baseline / name).read_bytes(), name
