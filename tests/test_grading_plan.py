"""What a finished result must match to be reused: the run's options, the grader that made it and its secret."""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

import pytest

from pagecheck.grading.plan import GradePlan, grader_fingerprint, source_fingerprint
from pagecheck.grading.results_store import reuse_reason
from pagecheck.grading import sandbox
from pagecheck.commands.grade import run_grading
from pagecheck.grading.rubric import load_rubric
from pagecheck.grading.sandbox import Limits
from pagecheck.grading.worker_process import WorkerLimits, WorkerProcess, WorkerSettings
from pagecheck.grading.suite_pass import code_roots, import_roots
from pagecheck.grading.seeds import MIN_SECRET_LENGTH, SECRET_FILE, SEED_FILE_LIMIT, resolve_secret
from tests.grading_results import result_document


def test_the_source_fingerprint_follows_the_code_and_nothing_else(tmp_path: Path) -> None:
    suite, grader = tmp_path / "suite", tmp_path / "grader"
    (suite / "checks").mkdir(parents=True)
    grader.mkdir()
    (suite / "checks" / "test_a.py").write_text("assert True\n")
    (grader / "rubric.toml").write_text("x = 1\n")
    first = source_fingerprint([suite, grader])
    (suite / "checks" / "__pycache__").mkdir()
    (suite / "checks" / "__pycache__" / "test_a.cpython-311.pyc").write_bytes(b"\0")
    (suite / "README.md").write_text("prose\n")
    assert source_fingerprint([suite, grader]) == first
    (grader / "rubric.toml").write_text("x = 2\n")
    assert source_fingerprint([suite, grader]) != first
    (grader / "rubric.toml").write_text("x = 1\n")
    (suite / "checks" / "test_a.py").rename(suite / "checks" / "test_b.py")  # same bytes, another file
    assert source_fingerprint([suite, grader]) != first
    assert source_fingerprint([grader, suite]) != source_fingerprint([suite, grader])


def test_a_result_from_another_grader_is_graded_again() -> None:
    """A grader fixed since a result was made (a check, the oracle, the sandbox) must not hand out that
    result's verdict again: the grader's fingerprint is one of the settings a rerun must match."""
    plan = GradePlan(secret="s" * 16, limits=Limits(60, 1 << 30), build_timeout_s=60, profile="default", device="cpu")
    settings = plan.settings()
    assert settings["grader"] == grader_fingerprint() and len(settings["grader"]) == 16
    document = result_document("s", {"context_len": ["pass"]}, settings=settings)
    document["digest"] = "d" * 64
    assert reuse_reason(document, "d" * 64, settings) is None
    older = {**settings, "grader": "0" * 16}
    assert reuse_reason(document, "d" * 64, older) == "the grading settings changed"


@pytest.mark.parametrize("mlx_on_cuda", [False, True], ids=["cpu-build", "cuda-build"])
def test_a_run_that_loads_mlx_on_cuda_limits_the_data_segment_and_any_other_the_address_space(
    mlx_on_cuda: bool, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    # MLX's CUDA back-end reserves far more address space than it uses: under a 4 GiB RLIMIT_AS it does not load,
    # whichever device it then computes on (seen on an H100: a CPU grade's workers all failed to import MLX).
    monkeypatch.setattr(sandbox, "mlx_runs_on_cuda", lambda: mlx_on_cuda)
    for device in ("cpu", "gpu"):
        kind = "data" if device == "gpu" or mlx_on_cuda else "address_space"
        plan = GradePlan(secret="s" * 16, limits=Limits(60, 1 << 30), build_timeout_s=60, profile="default",
                         device=device)  # fmt: skip
        assert (plan.trusted_limits.memory_kind, plan.worker_limits.memory_kind) == (kind, kind), device
    default = "data" if mlx_on_cuda else "address_space"
    assert (Limits(60, 1 << 30).memory_kind, WorkerLimits().memory_kind) == (default, default)
    # Such a worker also gets the GPU's files, and the grade one submission at a time.
    worker = WorkerProcess(WorkerSettings(spec="reference", device="cpu"), on_event=lambda event: None)
    config = worker._launch_config({"worker_in": 3, "worker_out": 4, "status": 5}, str(tmp_path))
    assert bool(config.device_paths) == mlx_on_cuda and config.memory_kind == default
    args = argparse.Namespace(jobs=2, device="cpu")
    if mlx_on_cuda:
        with pytest.raises(ValueError, match="--jobs=2 on this machine, whose MLX runs on CUDA"):
            run_grading(args, load_rubric(None))


def test_a_limit_given_in_gib_is_named_as_given() -> None:
    # 0.001 GiB holds 1,073,741 whole bytes: the refusal read "memory=0.000999999 GB".
    gib = 1 << 30
    with pytest.raises(ValueError, match=re.escape("memory=0.001 GB is below the 0.25 GB")):
        Limits(60, int(0.001 * gib))
    # A byte under the limit is not named as the limit itself ("0.25 GB is below the 0.25 GB").
    with pytest.raises(ValueError, match=re.escape("memory=0.2499999991 GB is below the 0.25 GB")):
        Limits(60, (256 << 20) - 1)
    with pytest.raises(ValueError, match=re.escape("disk=0.001 GB is below the 16 MiB")):
        GradePlan(secret="s" * 16, limits=Limits(60, gib), build_timeout_s=60, profile="default",
                  device="cpu", disk_bytes=int(0.001 * gib))  # fmt: skip


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda path: path.mkdir(), "cannot be read: it is a folder, not a file"),
        (lambda path: os.mkfifo(path), "cannot be read: the pipe did not reach its end"),
        (lambda path: path.write_bytes(b"x" * (SEED_FILE_LIMIT + 1)), "cannot be read: it holds more than"),
        (lambda path: path.write_bytes(b"\x84\x85secret"), "cannot be read: 'utf-8' codec can't decode"),
        # An empty file drew the hidden inputs from the secret "" (--seed '' and an empty --seed-file are refused).
        (lambda path: path.write_text(" \n"), "is empty"),
    ],
    ids=["folder", "fifo", "too-big", "not-utf8", "empty"],
)
def test_a_saved_secret_that_cannot_be_used_is_named(tmp_path: Path, monkeypatch, make, words: str) -> None:
    from pagecheck import input_files

    monkeypatch.setattr(input_files, "PIPE_WAIT_S", 0.2)
    saved = tmp_path / SECRET_FILE
    make(saved)
    with pytest.raises(ValueError, match=re.escape(f"the secret an earlier run saved, {saved}, ") + ".*" + re.escape(words)):
        resolve_secret(None, tmp_path)


def test_a_saved_secret_is_read_back_and_a_new_one_saved(tmp_path: Path) -> None:
    first = resolve_secret(None, tmp_path)
    assert len(first) >= MIN_SECRET_LENGTH and resolve_secret(None, tmp_path) == first
    assert (tmp_path / SECRET_FILE).stat().st_mode & 0o077 == 0


def test_a_result_records_the_digest_of_the_files_it_graded(tmp_path: Path, monkeypatch, capsys) -> None:
    """A file swapped between the run's digest and its staging (a synced folder) was graded as the new file but
    recorded under the old file's digest: restored, the old file reused the new file's points."""
    import json

    from pagecheck.cli import main
    from pagecheck.grading import grade_one
    from pagecheck.grading.submission import Submission, content_digest

    submission = tmp_path / "student.py"
    submission.write_text("BROKEN = True\n")
    stage = grade_one.stage_copy

    def swapped_then_staged(graded: Submission, staged: Path, *args, **kwargs) -> Path:
        graded.path.write_text("SWAPPED_IN = True\n")
        return stage(graded, staged, *args, **kwargs)

    monkeypatch.setattr(grade_one, "stage_copy", swapped_then_staged)
    out = tmp_path / "out"
    assert main(["grade", str(submission), "--out", str(out), "--seed", "s" * 32, "--invariants", "context_len"]) == 0
    recorded = json.loads((out / "results" / "student.json").read_text())["digest"]
    assert recorded == content_digest(Submission(name="student", path=submission, kind="file"))  # the swapped-in file
    monkeypatch.setattr(grade_one, "stage_copy", stage)
    submission.write_text("BROKEN = True\n")
    capsys.readouterr()
    assert main(["grade", str(submission), "--out", str(out), "--seed", "s" * 32, "--invariants", "context_len"]) == 0
    assert "graded 1, reused 0" in capsys.readouterr().err


def test_the_hidden_pass_starts_after_the_public_pass_ended_and_only_after_one_that_finished(
    tmp_path: Path, monkeypatch
) -> None:
    """Two workers at once could talk through what seccomp cannot close (read timing, the page cache): the hidden
    pass's inputs reached the public pass's feedback that way (red team). The passes run in turn."""
    import time

    from pagecheck.cli import main
    from pagecheck.grading import grade_one

    calls: list[tuple[str, float, float]] = []
    real = grade_one.run_suite_pass

    def timed(spec, seed, *args, **kwargs):
        start = time.monotonic()
        try:
            return real(spec, seed, *args, **kwargs)
        finally:
            calls.append((seed.kind, start, time.monotonic()))

    monkeypatch.setattr(grade_one, "run_suite_pass", timed)
    good = tmp_path / "good.py"
    good.write_text((Path(__file__).resolve().parent / "subjects" / "course_conformant.py").read_text())
    broken = tmp_path / "broken.py"
    broken.write_text("raise ImportError('this submission does not load')\n")
    options = ["--seed", "s" * 32, "--invariants", "context_len", "--jobs", "1"]
    assert main(["grade", str(good), "--out", str(tmp_path / "a"), *options]) == 0
    (public, _, public_end), (hidden, hidden_start, _) = calls
    assert (public, hidden) == ("public", "hidden") and hidden_start >= public_end
    calls.clear()
    main(["grade", str(broken), "--out", str(tmp_path / "b"), *options])
    assert [kind for kind, _, _ in calls] == ["public"]


def test_a_secret_given_on_the_command_line_is_stripped_as_one_read_from_a_file(tmp_path: Path) -> None:
    # --seed '  s  ' and a file holding '  s  ' drew different hidden inputs; --seed '   ' was taken as a secret.
    assert resolve_secret("  secret-of-the-course  ", tmp_path) == "secret-of-the-course"
    with pytest.raises(ValueError, match="is empty"):
        resolve_secret("   ", tmp_path)


def test_a_finding_only_the_hidden_pass_showed_says_neither_how_often_nor_where() -> None:
    """A count of refused calls chosen from the hidden inputs (405 gc calls: a hidden context of 4 in pages of 4)
    reached the feedback through the finding's "405 times, first during <check>"."""
    from types import SimpleNamespace

    from pagecheck.grading.grade_one import HIDDEN_PLACE, _worker_findings

    def events(n: int, check: str) -> list[dict[str, str]]:
        return [{"event": "introspection", "where": "attack.py:7", "detail": "gc.get_objects", "nodeid": check}] * n

    public = SimpleNamespace(seed=SimpleNamespace(kind="public"), events=[])
    hidden = SimpleNamespace(seed=SimpleNamespace(kind="hidden"), events=events(405, "x::test_a[course]"))
    (found,) = _worker_findings([public, hidden], [], "s" * 32)
    assert (found.file, found.line, found.kind, found.detail) == (HIDDEN_PLACE, 0, "tamper",
                                                                   "reported on the hidden inputs")  # fmt: skip
    shown = _worker_findings([SimpleNamespace(seed=SimpleNamespace(kind="public"), events=events(3, "x::test_b"))],
                             [], "s" * 32)  # fmt: skip
    assert "3 times, first during test_b" in shown[0].detail


def test_a_place_whose_line_is_not_ascii_digits_is_kept_whole_at_line_0() -> None:
    """'attention.py:²' passed str.isdigit() and int() refused it: the grader raised on one frame of the
    submission's and filed it as crashed, a grader failure (red team)."""
    from types import SimpleNamespace

    from pagecheck.grading.grade_one import _worker_findings

    events = [{"event": "introspection", "where": where, "detail": "gc.get_objects", "nodeid": "x::test_a"}
              for where in ("attention.py:\u00b2", "a:b.py:12", "attention.py:\u0663", "no place")]  # fmt: skip
    found = _worker_findings([SimpleNamespace(seed=SimpleNamespace(kind="public"), events=events)], [], "s" * 32)
    assert sorted((f.file, f.line) for f in found) == [("a:b.py", 12), ("attention.py:\u00b2", 0),
                                                       ("attention.py:\u0663", 0), ("no place", 0)]  # fmt: skip


def test_the_trusted_child_imports_from_where_the_grader_found_its_libraries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # On the GPU machine MLX and NumPy are staged into a folder on PYTHONPATH: the trusted child, given pagecheck's
    # root alone, failed every submission with "No module named 'mlx'" (crashed, exit status 3).
    staged = tmp_path / "site"
    staged.mkdir()
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["relative/site", str(staged), str(tmp_path / "missing"), ""]))
    roots = import_roots()
    assert roots[: len(code_roots())] == code_roots()
    assert roots[len(code_roots()):] == [staged.resolve()]
