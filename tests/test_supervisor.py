"""The console command's watcher (pagecheck.supervisor): a command's exit status is the one pagecheck itself
reached, never one left by code that ended the process early, and signals reach the command once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pagecheck import supervisor
from pagecheck.exit_codes import ExitCode

pytestmark = pytest.mark.skipif(not supervisor.can_watch(), reason="the watcher needs Linux's sigtimedwait")

ROOT = Path(__file__).resolve().parents[1]
# A serve-bench run of several seconds per variant on the small model.
LONG_SERVE = ["serve-bench", "--layers", "1", "--requests", "4", "--prompt-lens", "3,5", "--output-lens",
              "500,500", "--variants", "dense,paged"]


def pagecheck(*args: str, cwd: Path, **popen) -> subprocess.Popen:
    """`python -m pagecheck.cli ARGS` as the console script runs it: no argv given to main, so watched."""
    return subprocess.Popen([sys.executable, "-m", "pagecheck.cli", *args], cwd=cwd, text=True, **popen)


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    process = pagecheck(*args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = process.communicate(timeout=300)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        if Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            return True  # a zombie its (dead) parent left: it runs no more
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("body", [
    "import os\nos._exit(0)\n",  # at import
    # inside the third call, after two cells passed
    "import sys\nfrom pagecheck.impl import paged_attention as real\ncalls = []\n"
    "def paged_attention(*args, **kwargs):\n    calls.append(1)\n    if len(calls) == 3:\n        sys.exit(0)\n"
    "    return real(*args, **kwargs)\n",
])
def test_a_subject_that_ends_the_process_with_status_0_does_not_pass(tmp_path: Path, body: str) -> None:
    """Before the watcher, `pagecheck tolerance` exited 0 here, with no report: a success nobody earned."""
    (tmp_path / "quits.py").write_text(body)
    done = run("tolerance", "--quick", "--subject", "quits.py", "--out", "out", cwd=tmp_path)
    assert done.returncode == ExitCode.ENDED_EARLY, done.stderr[-2000:]
    assert "pagecheck tolerance: the command's process ended with status 0 before pagecheck finished" in done.stderr
    assert not (tmp_path / "out" / "tolerance.json").exists()


def test_statuses_pagecheck_reaches_pass_through(tmp_path: Path) -> None:
    assert run("--version", cwd=tmp_path).returncode == 0
    assert run("tolerance", "--quick", "--seed", "x", cwd=tmp_path).returncode == ExitCode.USAGE  # argparse
    missing = run("tolerance", "--subject", "no_such_module_here", cwd=tmp_path)
    assert missing.returncode == ExitCode.SUBJECT_LOAD_FAILED
    assert "ended" not in missing.stderr


@pytest.mark.parametrize("how", ["SIGTERM to the command", "SIGINT to the command", "Ctrl-C to its group"])
def test_a_signal_stops_the_command_once_and_it_keeps_what_finished(tmp_path: Path, how: str) -> None:
    """Signals sent to the watcher are passed on; a terminal's Ctrl-C, which reaches the whole group, is not
    passed on again. Either way serve-bench writes the variant that finished and exits 130."""
    process = pagecheck(*LONG_SERVE, "--out", "out", cwd=tmp_path, stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE, start_new_session=True)
    lines = []
    for line in process.stderr:
        lines.append(line)
        if "paged: warming up" in line:
            break
    if how == "Ctrl-C to its group":
        os.killpg(process.pid, signal.SIGINT)
    else:
        os.kill(process.pid, signal.SIGTERM if how.startswith("SIGTERM") else signal.SIGINT)
    err = "".join(lines) + process.stderr.read()
    process.wait(timeout=120)
    assert process.returncode == ExitCode.INTERRUPTED, err[-3000:]
    assert err.count("pagecheck serve-bench: interrupted\n") == 1, err[-3000:]
    document = json.loads((tmp_path / "out" / "serve_bench.json").read_text())
    assert list(document["variants"]) == ["dense"]


def serving(tmp_path: Path) -> tuple[subprocess.Popen, int]:
    """A long serve-bench started and warming up: the watcher, and the pid of the command's process."""
    process = pagecheck(*LONG_SERVE, "--out", "out", cwd=tmp_path, stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE)
    for line in process.stderr:
        if "warming up" in line:
            break
    (child,) = children(process.pid)
    return process, child


def test_a_command_killed_outright_is_reported_with_its_signal(tmp_path: Path) -> None:
    process, child = serving(tmp_path)
    os.kill(child, signal.SIGKILL)
    err = process.stderr.read()
    assert process.wait(timeout=60) == 128 + signal.SIGKILL
    assert "pagecheck serve-bench: the command's process was killed by SIGKILL before it finished (out of memory?)" in err


def test_the_command_stops_when_its_watcher_is_killed(tmp_path: Path) -> None:
    process, child = serving(tmp_path)
    process.kill()
    process.wait()
    assert gone(child, 30), "the command outlived its watcher"


def test_the_result_pipe_is_not_handed_on(monkeypatch) -> None:
    """A process the command starts neither sees the pipe's variable nor inherits its descriptor."""
    read_end, write_end = os.pipe()
    monkeypatch.setenv(supervisor.RESULT_FD_ENV, f"{write_end},{os.getppid()}")
    monkeypatch.setattr(supervisor, "_die_with", lambda watcher: None)
    try:
        supervisor.become_child()
        assert supervisor.RESULT_FD_ENV not in os.environ and not os.get_inheritable(write_end)
        seen = subprocess.run([sys.executable, "-c", f"import os; os.fstat({write_end})"], capture_output=True)
        assert seen.returncode != 0  # closed in the grandchild
        supervisor.send_result(4)
        assert os.read(read_end, 16) == b"4\n"
        supervisor.send_result(0)  # once only: the descriptor is closed and forgotten
    finally:
        os.close(read_end)
        monkeypatch.setattr(supervisor, "_result_fd", None)


def test_a_file_named_like_a_standard_module_in_the_current_folder_changes_nothing(tmp_path: Path) -> None:
    """`python -m` puts the current folder first on sys.path; the command's process takes it off until pagecheck
    has loaded, so a student's random.py there broke every command, --version included."""
    (tmp_path / "random.py").write_text("raise ImportError('not the standard library random')\n")
    (tmp_path / "string.py").write_text("")
    version = run("--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.startswith("pagecheck "), version.stderr[-2000:]
    done = run("tolerance", "--quick", "--out", "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_process_that_never_began_the_command_is_not_blamed_on_a_subject(capsys) -> None:
    assert supervisor.ended_early("", 1, started=False) == 1
    assert supervisor.ended_early("report", 0, started=False) == ExitCode.INTERNAL_ERROR
    err = capsys.readouterr().err
    assert err.startswith("pagecheck: the command's process ended with status 1 before it began the command")
    assert "pagecheck report: the command's process ended with status 0 before it began" in err
    assert "subject" not in err
