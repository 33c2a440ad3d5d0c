"""End to end: `pagecheck grade` on the fixture gallery (tests/grading_fixtures/README.md lists it).

The whole gallery (honest, broken and hostile submissions together) is graded
once per test run, by whichever test asks first (under xdist the workers
share it through a lock file), with a reduced set of invariants, short limits
and two jobs. Expected points are literal numbers, worked out by hand from
the fixture rubric (course clauses: release_once 10, lazy_tail 10; beyond the
course: lazy_tail 5, head_dims 5, inputs_unchanged 5 which requires head_dims;
the course's rules zero both totals, gathers only the total beyond the course,
tamper only flags). These are the slowest tests of the
repository: marked `slow`.
"""

from __future__ import annotations

import base64
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

import jsonschema
import pytest

from pagecheck.grading.outputs import write_outputs
from pagecheck.grading.results_store import load_all_results
from pagecheck.grading.rubric import load_rubric
from pagecheck.grading.seeds import hidden_seed
from pagecheck.grading.shards import shard_of
from pagecheck.grading.submission import MAX_FILE_BYTES, MAX_FOLDER_DEPTH

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "grading_fixtures"
CORRECT = FIXTURES / "correct"
HOSTILE = FIXTURES / "hostile"
OVERLAYS = FIXTURES / "overlays"
OVERLAY_COMMON = FIXTURES / "overlay_common"  # copied beside every overlay
SECRET = "grading-fixtures-secret-7d1f"
INVARIANTS = ("release_once", "lazy_tail", "head_dims", "inputs_unchanged")
RUBRIC = FIXTURES / "rubric.toml"
OPTIONS = ["--jobs", "2", "--timeout", "240", "--call-timeout", "5", "--memory", "2", "--disk", "0.25",
           "--seed", SECRET, "--invariants", ",".join(INVARIANTS), "--rubric", str(RUBRIC)]  # fmt: skip
RUN_LIMIT_S = 1500
NOBODY_UID = 65534
LONG_NAME = "long_" + "n" * 238  # 246 characters with ".py"
ODD_PACKAGE = b"odd_\xff_pkg"  # a folder name that is not UTF-8
# Markers on the command lines of processes the hostile submissions start, to look for after the run.
MARKERS = (b"pagecheck-hostile-daemon", b"pagecheck-hostile-fork-bomb", b"86400.25")


@dataclass(frozen=True)
class Expected:
    verdict: str
    cells: tuple[str, str, str, str, str]  # COLUMNS, as in grades.csv
    total: str  # the course clauses
    beyond: str  # the clauses beyond the course
    flags: str = ""


# The course clauses of release_once and lazy_tail, then the clauses beyond the course of lazy_tail, head_dims
# and inputs_unchanged.
COLUMNS = ("release_once", "lazy_tail", "lazy_tail (beyond the course)", "head_dims (beyond the course)",
           "inputs_unchanged (beyond the course)")  # fmt: skip
NOTHING = ("0", "0", "0", "0", "0")  # an unfinished run; or every check skipped, or failed
CACHES_ONLY = ("10", "10", "5", "0", "0")  # the pool and cache are right, the attention is not
EVERYTHING = ("10", "10", "5", "5", "5")
EXPECTED: dict[str, Expected] = {
    "correct": Expected("ok", EVERYTHING, "20", "15"),
    "starter": Expected("ok", NOTHING, "0", "0"),
    # its paged_attention is the extension's function, whose source the grader cannot read: for a reviewer
    "needs_extension": Expected("build-failed", NOTHING, "0", "0", "entry_unresolved"),
    # overlays on correct/
    "segfault": Expected("ok", CACHES_ONLY, "20", "5"),
    "hang": Expected("ok", CACHES_ONLY, "20", "5"),
    "hoard": Expected("ok", CACHES_ONLY, "20", "5"),
    # paged_attention's source names mx.fast and gather_dense: the course's source check refuses it.
    "calls_sdpa": Expected("ok", CACHES_ONLY, "0", "0",
                           "dense_gather dense_route gather_trap page_join sdpa_call sdpa_route sdpa_trap"),
    # SDPA through a helper and a name built at run time: the course's source check passes it, so only the total
    # beyond the course goes (the trap raises, so the attention fails its course checks as well).
    "sdpa_original": Expected("ok", CACHES_ONLY, "20", "0", "gather_trap page_join sdpa_trap"),
    # A gather the course does not forbid costs the total beyond the course, never a course point.
    "fancy_gather": Expected("ok", EVERYTHING, "20", "0", "gather_trap"),
    "getattr_concat": Expected("ok", EVERYTHING, "20", "0", "gather_trap"),
    "setitem_gather": Expected("ok", EVERYTHING, "20", "0", "gather_trap"),
    # Forged event frames flag the submission and hide no tripwire report: the gather is still seen.
    "forged_events": Expected("ok", EVERYTHING, "20", "0", "gather_trap tamper"),
    # MLX's C++ SDPA from the extension: no Python trap sees it; the scan of its source and library does. The
    # course's source check reads paged_attention's Python text alone and passes it: the course total stays.
    "native_sdpa": Expected("ok", EVERYTHING, "20", "0", "sdpa_route"),
    "clamps_block_table": Expected("ok", CACHES_ONLY, "20", "5"),
    # An output that is not an array would be read through its handle after the call, outside the gather watch.
    "deferred_output": Expected("ok", CACHES_ONLY, "20", "5"),
    "cast_pool": Expected("ok", EVERYTHING, "20", "15"),  # reads the pools whole in float32: no gather, no flag
    "kill_parent": Expected("ok", EVERYTHING, "20", "15"),
    "fill_disk": Expected("ok", EVERYTHING, "20", "15"),
    "flood": Expected("ok", EVERYTHING, "20", "15"),
    # hostile
    "atexit_rewrite": Expected("ok", NOTHING, "0", "0"),
    "gc_pytest_hook": Expected("ok", NOTHING, "0", "0", "tamper"),
    "import_module_reference": Expected("load-failed", NOTHING, "0", "0", "entry_unresolved project_import"),
    "dunder_import_impl": Expected("load-failed", NOTHING, "0", "0", "entry_unresolved project_import"),
    "reference": Expected("load-failed", NOTHING, "0", "0", "project_import"),
    "impl": Expected("load-failed", NOTHING, "0", "0"),  # its own empty package, named like a layer: nothing to check
    "patch_helpers": Expected("ok", NOTHING, "0", "0", "project_import"),
    "fork_setsid_daemon": Expected("load-failed", NOTHING, "0", "0"),  # its os.fork() at import is refused
    "rewrite_others": Expected("ok", NOTHING, "0", "0"),
    "exfiltrate_secret": Expected("ok", NOTHING, "0", "0"),
    "fork_bomb": Expected("ok", NOTHING, "0", "0"),
    "setsid_sleeps": Expected("ok", NOTHING, "0", "0"),
    # Throwing MLX out of sys.modules breaks the worker's own arrays: every call fails before any SDPA.
    "reimport_mlx": Expected("ok", NOTHING, "0", "0", "sdpa_call sdpa_route tamper"),
    "network": Expected("ok", NOTHING, "0", "0"),
    # A folder name that is not UTF-8: staged, loaded by its path and graded as the long name's (odd_names.py)
    "odd___pkg": Expected("ok", NOTHING, "0", "0"),
    "deep_folders": Expected("load-failed", NOTHING, "0", "0"),  # refused before staging, the run goes on
    "big_file": Expected("load-failed", NOTHING, "0", "0"),  # refused unread, the run goes on
    # A module the grader's parser cannot read (its scan once crashed the grading): full points, flagged.
    "deep_expression": Expected("ok", EVERYTHING, "20", "15", "unscanned"),
    f"{LONG_NAME[:87]}-{'x' * 12}": Expected("ok", NOTHING, "0", "0"),  # the hash is checked separately
}
HONEST = ("correct", "cast_pool", "kill_parent", "fill_disk", "flood", "deep_expression")
INTERRUPTED = ("correct", "segfault", "starter")


def build_gallery(where: Path) -> list[Path]:
    """Every submission of the gallery, the overlays and odd names made up in `where`."""
    for overlay in sorted(OVERLAYS.iterdir()):
        target = where / overlay.name
        shutil.copytree(CORRECT, target)
        shutil.copy(CORRECT / "src" / "tiny_llm" / "attention.py", target / "src" / "tiny_llm" / "honest_attention.py")
        shutil.copy(OVERLAY_COMMON / "dense_rows.py", target / "src" / "tiny_llm" / "dense_rows.py")
        shutil.copytree(overlay, target, dirs_exist_ok=True)
    deep = where / "deep_folders"  # correct/, with a folder nested past the staging limit
    shutil.copytree(CORRECT, deep)
    (deep / "src" / Path(*["d"] * (MAX_FOLDER_DEPTH + 1))).mkdir(parents=True)
    big = where / "big_file"  # correct/, with a sparse file past the staging limit
    shutil.copytree(CORRECT, big)
    with open(big / "src" / "tiny_llm" / "weights.bin", "wb") as file:
        file.truncate(MAX_FILE_BYTES + 1)
    nested = where / "deep_expression"  # correct/, with a module nested past the grader's parser, never imported
    shutil.copytree(CORRECT, nested)
    (nested / "src" / "tiny_llm" / "generated_table.py").write_text("TOTAL = " + "+".join(["1"] * 200_000) + "\n")
    source = (HOSTILE / "odd_names.py").read_bytes()
    (where / f"{LONG_NAME}.py").write_bytes(source)
    package = _odd_package(where)
    package.mkdir()
    (package / "__init__.py").write_bytes(source)
    (package / os.fsdecode(b"data_\xfe.py")).write_bytes(b"VALUE = 1\n")
    (package / ("x" * 243 + ".py")).write_bytes(b"VALUE = 2\n")
    return gallery_paths(where)


def _odd_package(where: Path) -> Path:
    return Path(os.fsdecode(os.path.join(os.fsencode(where), ODD_PACKAGE)))


def gallery_paths(where: Path) -> list[Path]:
    """The submissions of a gallery that build_gallery made up in `where`, in grading order."""
    paths = [CORRECT, FIXTURES / "starter", FIXTURES / "needs_extension"]
    paths += [where / overlay.name for overlay in sorted(OVERLAYS.iterdir())]
    paths += sorted(p for p in HOSTILE.iterdir() if p.name != "odd_names.py" and p.name != "__pycache__")
    return [*paths, where / "deep_folders", where / "big_file", where / "deep_expression", where / f"{LONG_NAME}.py",
            _odd_package(where)]


def grade(paths: list[Path], out: Path, *extra: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pagecheck.cli", "grade", *map(os.fspath, paths), "--out", str(out), *OPTIONS,
               *extra]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=RUN_LIMIT_S,
                          errors="replace")  # fmt: skip
    # repr: a path that is not UTF-8 (the odd package's) would stop pytest-xdist from sending the report at all
    assert done.returncode == 0, f"{' '.join(map(repr, command))}\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="session")
def gallery(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The gallery, made up once per run: under xdist every worker shares one copy, as it shares `graded`,
    whose feedback names the submissions' paths (a worker's own copy would differ from it in every path)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return build_gallery(tmp_path_factory.mktemp("gallery"))
    shared = tmp_path_factory.getbasetemp().parent  # one directory for all workers of this run
    where = shared / "gallery"
    with open(shared / "gallery.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (where / "complete").exists():
            shutil.rmtree(where, ignore_errors=True)
            where.mkdir()
            build_gallery(where)
            (where / "complete").touch()
    return gallery_paths(where)


@pytest.fixture(scope="session")
def graded(tmp_path_factory: pytest.TempPathFactory, gallery: list[Path]) -> Path:
    """OUT of one uninterrupted grading run of the whole gallery."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        out = tmp_path_factory.mktemp("graded")
        grade(gallery, out)
        return out
    shared = tmp_path_factory.getbasetemp().parent  # one directory for all workers of this run
    out = shared / "graded"
    with open(shared / "graded.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "grades.csv").exists():
            grade(gallery, out)
    return out


def scoreboard_rows(out: Path) -> dict[str, dict[str, str]]:
    with open(out / "grades.csv", newline="") as file:
        return {row["submission"]: row for row in csv.DictReader(file)}


def _expected_name(name: str) -> str:
    """The name EXPECTED knows a result by: a hashed name (too long, or not safe as it was) without its hash."""
    if name.startswith("long_"):
        return f"{name[:87]}-{'x' * 12}"
    return name.rpartition("-")[0] if name.startswith("odd___pkg-") else name


def test_every_submission_gets_its_verdict_points_and_flags(graded: Path) -> None:
    rows = {_expected_name(name): row for name, row in scoreboard_rows(graded).items()}
    assert sorted(rows) == sorted(EXPECTED), "the run finished for every submission, and only those"
    for name, expected in EXPECTED.items():
        row = rows[name]
        got = (row["verdict"], tuple(row[c] for c in COLUMNS), row["total"], row["beyond"], row["flags"])
        assert got == (expected.verdict, expected.cells, expected.total, expected.beyond, expected.flags), name


def test_a_submission_that_cannot_be_staged_says_why(graded: Path) -> None:
    detail = json.loads((graded / "results" / "deep_folders.json").read_text())["detail"]
    assert detail.startswith("its files could not be staged: folder 'src/d/d/") and "nests more than" in detail
    detail = json.loads((graded / "results" / "big_file.json").read_text())["detail"]
    assert detail == (f"its files could not be staged: file 'src/tiny_llm/weights.bin' is {MAX_FILE_BYTES + 1} "
                      f"bytes, over the {MAX_FILE_BYTES} a graded file may have")


def test_honest_submissions_keep_their_exact_score(graded: Path) -> None:
    rows = scoreboard_rows(graded)
    assert {name: (rows[name]["total"], rows[name]["beyond"]) for name in HONEST} == {name: ("20", "15") for name in HONEST}
    correct = {d["name"]: d for d in load_all_results(graded)}["correct"]
    assert correct["findings"] == [] and correct["incidents"] == []
    assert all(check["outcome"] == "pass" for check in correct["checks"])


def test_long_and_odd_names_get_short_safe_names(graded: Path) -> None:
    names = [d["name"] for d in load_all_results(graded)]
    long_names = [n for n in names if n.startswith("long_")]
    assert len(long_names) == 1 and len(long_names[0]) == 100 and re.fullmatch(r"long_n+-[0-9a-f]{12}", long_names[0])
    assert [n for n in names if re.fullmatch(r"odd___pkg-[0-9a-f]{12}", n)]  # not safe as it was: hashed


def test_results_follow_their_schema(graded: Path) -> None:
    schema = json.loads((ROOT / "reports" / "schema" / "grade.schema.json").read_text())
    for document in load_all_results(graded):
        jsonschema.Draft202012Validator(schema).validate(document)


def test_worker_deaths_fail_only_their_own_checks(graded: Path) -> None:
    results = {d["name"]: d for d in load_all_results(graded)}
    for name, kind in (("segfault", "crashed"), ("hang", "timed-out"), ("hoard", "out-of-memory")):
        incidents = results[name]["incidents"]
        assert incidents and {i["kind"] for i in incidents} == {kind}, name
        failed = {c["invariant"] for c in results[name]["checks"] if c["outcome"] != "pass"}
        assert failed == {"head_dims", "inputs_unchanged"}, name
    assert "SIGSEGV" in results["segfault"]["incidents"][0]["detail"]


def test_every_call_is_checked_for_changed_inputs(graded: Path) -> None:
    results = {d["name"]: d for d in load_all_results(graded)}
    failed = {c["invariant"] for c in results["clamps_block_table"]["checks"]
              if "changed its input block_table" in c["message"]}  # fmt: skip
    assert failed == {"head_dims", "inputs_unchanged"}


def _stat_fields(proc: Path) -> list[str]:
    """/proc/PID/stat's fields after the command name (field 3, the state, first)."""
    return (proc / "stat").read_text().rsplit(")", 1)[1].split()


def _parent(proc: Path) -> int:
    return int(_stat_fields(proc)[1])


def _processes(uid: int | None = None, markers: tuple[bytes, ...] = ()) -> list[int]:
    """Processes with one of `markers` in their command line, or owned by `uid` and orphaned (their parent
    gone: adopted by init or a subreaper). A live sandbox of another test running beside this one has its
    grader as a parent; a process that outlived its grader does not."""
    found = []
    live = {int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if uid is not None and proc.stat().st_uid == uid:
                parent = _parent(proc)
                if parent in (0, 1) or parent not in live:
                    found.append(int(proc.name))
            elif markers and any(m in (proc / "cmdline").read_bytes() for m in markers):
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def _lasting(find, seconds: float = 5.0) -> list[int]:
    """The processes `find` returns now and still returns, as the same processes (pid and start time), at
    every look over `seconds`. A sandbox that another test's grader is tearing down beside this one can show
    a child for an instant after its parent has gone; a process that outlived its grader stays."""
    def look() -> set[tuple[int, str]]:
        seen = set()
        for pid in find():
            try:
                seen.add((pid, _stat_fields(Path("/proc") / str(pid))[19]))  # field 22, the start time
            except (OSError, IndexError):
                continue
        return seen

    remaining = look()
    deadline = time.monotonic() + seconds
    while remaining and time.monotonic() < deadline:
        time.sleep(0.25)
        remaining &= look()
    return sorted(pid for pid, _ in remaining)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_no_process_of_any_submission_outlives_the_run(graded: Path) -> None:
    assert _lasting(lambda: _processes(markers=MARKERS)) == []
    if os.geteuid() == 0:  # every submission ran as nobody
        assert _lasting(lambda: _processes(uid=NOBODY_UID)) == []


def _spellings(text: str) -> list[str]:
    return [text, "-".join(text), text[::-1], base64.b64encode(text.encode()).decode(), text.encode().hex()]


def test_secret_is_in_no_file_a_student_sees(graded: Path) -> None:
    secrets = _spellings(SECRET)
    hidden = [str(hidden_seed(SECRET, d["name"])) for d in load_all_results(graded)]
    student_files = [*sorted((graded / "feedback").glob("*.md")), graded / "grades.md", graded / "grades.csv"]
    for path in student_files:
        text = path.read_text()
        assert not any(secret in text for secret in secrets), path
        assert not any(seed in text for seed in hidden), path
    exfiltrator = (graded / "feedback" / "exfiltrate_secret.md").read_text()
    assert "exfiltrated:" in exfiltrator  # its message did reach the feedback: it holds nothing secret


def test_hidden_pass_ran_with_the_hidden_seed(graded: Path) -> None:
    results = {d["name"]: d for d in load_all_results(graded)}
    assert [p["seed"] for p in results["correct"]["passes"]] == [20240901, hidden_seed(SECRET, "correct")]


def test_grades_name_the_sandbox_protections(graded: Path) -> None:
    text = (graded / "grades.md").read_text()
    assert re.search(r"^Sandbox(: every protection was on| protections OFF: .+)\.$", text, flags=re.MULTILINE)
    correct = {d["name"]: d for d in load_all_results(graded)}["correct"]
    assert {"pid_namespace", "landlock", "audit_hook", "disk_quota"} <= set(correct["protections"])


def test_worker_output_is_capped(graded: Path) -> None:
    for log in (graded / "logs" / "flood").glob("*-worker.log"):
        assert log.stat().st_size < (1 << 20) + 4096, log
        assert "more bytes of worker output dropped" in log.read_text(errors="replace")


def test_feedback_command_reproduces_the_failure(graded: Path, gallery: list[Path], tmp_path: Path) -> None:
    # A failure only the grading plugin shows: the call changed its inputs, the output was right.
    feedback = (graded / "feedback" / "clamps_block_table.md").read_text()
    commands = re.findall(r"^    (\S+ -m pytest .*test_head_dims.*--pagecheck-seed \d+.*)$", feedback, flags=re.MULTILINE)
    assert commands, feedback
    # Pasted as written, in a directory that has nothing to do with the checkout or the submission.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run(commands[0] + " -p no:xdist", shell=True, cwd=elsewhere, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode == 1 and "1 failed" in done.stdout, done.stdout + done.stderr
    assert "changed its input block_table" in done.stdout


def test_rerun_reuses_every_finished_result(graded: Path, gallery: list[Path]) -> None:
    before = {name: (graded / name).read_bytes() for name in ("grades.md", "grades.csv")}
    done = grade(gallery, graded)
    assert f"0 to grade, {len(EXPECTED)} finished earlier" in done.stderr
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
    for name in ("grades.md", "grades.csv"):
        assert (merged / name).read_bytes() == (graded / name).read_bytes()


@pytest.mark.parametrize(
    "change, words",
    [
        ({"name": "../../../escaped"}, "$.name: '../../../escaped' does not match"),
        ({"name": ["a"]}, "$.name: ['a'] is not of type 'string'"),
        ({"checks": "none"}, "$.checks: 'none' is not of type 'array'"),
    ],
    ids=["a-path-for-a-name", "a-list-for-a-name", "a-string-for-checks"],
)
def test_merge_refuses_a_result_that_breaks_the_schema_before_it_copies_anything(
    graded: Path, tmp_path: Path, change: dict, words: str
) -> None:
    """A shard result named '../../../escaped' was written outside --out; other malformed ones crashed the merge
    after the first files were copied."""
    from pagecheck.grading.merge import merge_results

    shard = tmp_path / "shard" / "results"
    shard.mkdir(parents=True)
    real = json.loads((graded / "results" / "correct.json").read_text())
    (shard / "a.json").write_text(json.dumps(real))
    (shard / "x.json").write_text(json.dumps({**real, **change}))
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ValueError, match=r"result .*x\.json does not follow grade\.schema\.json") as refused:
        merge_results([shard.parent], out)
    assert words in str(refused.value)
    assert list(out.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["out", "shard"]


def _grader_children(out: Path) -> list[int]:
    """Processes still running with this output directory on their command line."""
    return _processes(markers=(str(out).encode(),))


def test_interrupted_run_resumes_to_the_same_scoreboard(graded: Path, gallery: list[Path], tmp_path: Path) -> None:
    """Kill the grader (SIGKILL) after its first result, rerun: the same bytes as an uninterrupted run."""
    paths = [next(p for p in gallery if p.name == name) for name in INTERRUPTED]
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
    if sys.platform.startswith("linux"):  # children and sandboxes die with the grader (PR_SET_PDEATHSIG)
        for _ in range(100):
            if not _grader_children(out) and not (os.geteuid() == 0 and _processes(uid=NOBODY_UID)):
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


def test_overlays_change_only_modules_the_grader_imports() -> None:
    # A tiny-llm checkout is loaded without running its package __init__ (invariants/subject.py), so an attack
    # placed there never runs and its overlay would test nothing: kill_parent and fill_disk once did.
    inert = sorted(str(path.relative_to(OVERLAYS)) for path in OVERLAYS.glob("*/src/tiny_llm/__init__.py"))
    assert not inert, f"overlay files the grader never imports: {inert}"
