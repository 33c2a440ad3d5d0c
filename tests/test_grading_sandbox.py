"""The limited child: how it ends, what it sees, and the verdict its ending gives."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pagecheck.grading.child_plugin import OOM_EXIT_CODE, is_memory_error
from pagecheck.grading.sandbox import GIB, ChildExit, Limits, child_environment, run_limited
from pagecheck.grading.verdicts import classify_pass

ROOT = Path(__file__).resolve().parent.parent


def run_python(code: str, tmp_path: Path, *, timeout_s: float = 30.0, memory_gb: float = 1.0) -> ChildExit:
    env = child_environment(tmp_path, [ROOT])
    limits = Limits(timeout_s, int(memory_gb * GIB))
    return run_limited([sys.executable, "-c", code], cwd=tmp_path, env=env, limits=limits, log_path=tmp_path / "log")


def test_segfault_is_reported_with_its_signal(tmp_path: Path) -> None:
    exit = run_python("import ctypes; ctypes.string_at(0)", tmp_path)
    assert (exit.signal_name, exit.timed_out) == ("SIGSEGV", False)
    assert classify_pass(exit, [], False, "", GIB).verdict == "crashed"


def test_wall_clock_limit_kills_the_child(tmp_path: Path) -> None:
    exit = run_python("import time; time.sleep(600)", tmp_path, timeout_s=1.0)
    assert exit.timed_out and exit.signal_name == "SIGKILL"
    assert classify_pass(exit, [], False, "", GIB).verdict == "timed-out"


def test_address_space_limit_fails_allocations(tmp_path: Path) -> None:
    exit = run_python("import numpy as np; np.empty(3 << 30, dtype=np.uint8)", tmp_path, memory_gb=1.0)
    assert exit.returncode == 1
    assert "MemoryError" in (tmp_path / "log").read_text()


def test_environment_is_scrubbed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAGECHECK_GRADER_TOKEN", "do-not-leak")
    code = "import json, os; print('ENV=' + json.dumps(dict(os.environ)))"
    assert run_python(code, tmp_path).returncode == 0
    line = next(l for l in (tmp_path / "log").read_text().splitlines() if l.startswith("ENV="))
    env = json.loads(line.removeprefix("ENV="))
    assert "do-not-leak" not in line
    assert env["HOME"] == str(tmp_path)
    # LC_CTYPE: Python sets it in its own environment when it coerces a C locale to UTF-8 (PEP 538).
    assert set(env) <= {"PATH", "HOME", "TMPDIR", "LANG", "PYTHONPATH", "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE",
                        "PYTHONNOUSERSITE", "PYTHONSAFEPATH", "MALLOC_ARENA_MAX", "LC_CTYPE"}  # fmt: skip


def _exit(returncode: int, peak_gb: float = 0.1, timed_out: bool = False) -> ChildExit:
    return ChildExit(returncode=returncode, timed_out=timed_out, elapsed_s=1.0, peak_rss_bytes=int(peak_gb * GIB))


def test_signal_death_near_the_memory_limit_is_out_of_memory() -> None:
    # MLX dies of SIGSEGV when an allocation fails under RLIMIT_AS.
    assert classify_pass(_exit(-11, peak_gb=1.7), [], False, "", 2 * GIB).verdict == "out-of-memory"
    assert classify_pass(_exit(-11, peak_gb=0.1), [], False, "", 2 * GIB).verdict == "crashed"


def test_memory_error_exit_is_out_of_memory() -> None:
    journal = [{"event": "session"}, {"event": "oom", "nodeid": "x", "message": "MemoryError: boom"}]
    verdict = classify_pass(_exit(OOM_EXIT_CODE), journal, False, "", GIB)
    assert (verdict.verdict, verdict.detail) == ("out-of-memory", "MemoryError: boom")


def test_subject_that_does_not_import_is_load_failed() -> None:
    log = "ERROR: subject spec='x.py': importing x.py failed: SyntaxError('bad')\n"
    verdict = classify_pass(_exit(4), [], False, log, GIB)
    assert verdict.verdict == "load-failed" and "SyntaxError" in verdict.detail


def test_exit_without_results_is_a_crash() -> None:
    assert classify_pass(_exit(0), [{"event": "session"}], False, "", GIB).verdict == "crashed"
    assert classify_pass(_exit(1), [{"event": "session"}], True, "", GIB).verdict == "ok"


def test_memory_errors_are_found_inside_groups_and_chains() -> None:
    try:
        try:
            raise MemoryError("inner")
        except MemoryError as exc:
            raise ValueError("wrapped") from exc
    except ValueError as wrapped:
        chained = wrapped
    assert is_memory_error(chained)
    assert is_memory_error(ExceptionGroup("two failures", [ValueError("a"), MemoryError("b")]))
    assert not is_memory_error(ExceptionGroup("two failures", [ValueError("a"), KeyError("b")]))


def test_importing_the_grader_leaves_mlx_sdpa_alone(tmp_path: Path) -> None:
    # The trap belongs in the children only; `pagecheck bench` times the real SDPA in this process.
    code = "import pagecheck.cli, mlx.core as mx; print(type(mx.fast.scaled_dot_product_attention).__name__)"
    assert run_python(code, tmp_path).returncode == 0
    assert "SdpaTrap" not in (tmp_path / "log").read_text()


@pytest.mark.parametrize("memory, limited, free", [("1073741824", "RLIMIT_AS", "RLIMIT_DATA"),
                                                   ("1073741824:data", "RLIMIT_DATA", "RLIMIT_AS")])
def test_the_limits_program_caps_the_address_space_or_the_data_segment(memory: str, limited: str, free: str) -> None:
    report = ("import resource; print(resource.getrlimit(resource." + limited + ")[0], "
              "resource.getrlimit(resource." + free + ")[0] == resource.RLIM_INFINITY)")  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "pagecheck.grading.limits", memory, "--", sys.executable, "-c", report],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.stdout.split() == ["1073741824", "True"], done.stderr
    refused = subprocess.run([sys.executable, "-m", "pagecheck.grading.limits", "1G:data", "--", "true"],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    assert refused.returncode != 0 and "usage:" in refused.stderr


def test_a_pass_that_stopped_before_its_last_check_is_not_finished() -> None:
    # A red-team submission broke the suite's journal after one check of the hidden pass; the checks it never
    # reached must not be left to the public pass's outcome.
    journal = [{"event": "session"}, {"event": "collected", "count": 3},
               {"event": "start", "nodeid": "a"}, {"event": "end", "nodeid": "a"}]  # fmt: skip
    verdict = classify_pass(_exit(1), journal, True, "", GIB)
    assert (verdict.verdict, verdict.detail) == ("crashed", "the suite stopped after 1 of its 3 checks")
    finished = journal + [{"event": "end", "nodeid": n} for n in ("b", "c")]
    assert classify_pass(_exit(1), finished, True, "", GIB).verdict == "ok"


def test_stream_back_follows_no_link_the_program_left(tmp_path: Path) -> None:
    """Init (no Landlock) streams a build's folder back: a folder replaced by a link to another (`mv submission x;
    ln -s ~grader submission`) sent that folder's files, and a file replaced by a link its target's."""
    import tarfile

    from pagecheck.grading.launcher import _stream_back

    secret = tmp_path / "grader"
    secret.mkdir()
    (secret / "key").write_text("TOPSECRET")
    built = tmp_path / "built"
    built.mkdir()
    (built / "kernel.so").write_bytes(b"\x7fELF")
    (built / "key").symlink_to(secret / "key")
    linked = tmp_path / "linked"
    linked.symlink_to(secret)

    def members(folder: Path) -> dict[str, bytes]:
        archive_path = tmp_path / f"{folder.name}.tar"
        _stream_back(str(folder), os.open(archive_path, os.O_WRONLY | os.O_CREAT))
        with tarfile.open(archive_path) as archive:
            return {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}

    assert members(built) == {"kernel.so": b"\x7fELF"}
    assert members(linked) == {}
