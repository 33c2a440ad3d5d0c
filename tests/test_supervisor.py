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
    # inside the third call, after two cells passed (a sys.exit there fails that cell only)
    "import os\nfrom pagecheck.impl import paged_attention as real\ncalls = []\n"
    "def paged_attention(*args, **kwargs):\n    calls.append(1)\n    if len(calls) == 3:\n        os._exit(0)\n"
    "    return real(*args, **kwargs)\n",
])
def test_a_subject_that_ends_the_process_with_status_0_does_not_pass(tmp_path: Path, body: str) -> None:
    """Before the watcher, `pagecheck tolerance` exited 0 here, with no report: a success nobody earned."""
    (tmp_path / "quits.py").write_text(body)
    done = run("tolerance", "--quick", "--subject", "quits.py", "--out", "out", cwd=tmp_path)
    assert done.returncode == ExitCode.ENDED_EARLY, done.stderr[-2000:]
    assert "pagecheck tolerance: the command's process ended with status 0 before pagecheck sent its result" in done.stderr
    # The cells that finished before the process ended are kept, marked INCOMPLETE and not passed.
    kept = tmp_path / "out" / "tolerance.json"
    assert not kept.exists() or (json.loads(kept.read_text())["passed"] is False and "interrupted" in json.loads(kept.read_text()))


def test_statuses_pagecheck_reaches_pass_through(tmp_path: Path) -> None:
    assert run("--version", cwd=tmp_path).returncode == 0
    assert run("tolerance", "--quick", "--seed", "x", cwd=tmp_path).returncode == ExitCode.USAGE  # argparse
    missing = run("tolerance", "--subject", "no_such_module_here", cwd=tmp_path)
    assert missing.returncode == ExitCode.SUBJECT_LOAD_FAILED
    assert "ended" not in missing.stderr


@pytest.mark.parametrize("closed", [(2,), (1, 2), (0, 1, 2)], ids=["stderr", "stdout-stderr", "all"])
def test_a_command_started_with_its_standard_streams_closed_runs_and_reports(tmp_path: Path, closed) -> None:
    """`pagecheck tolerance ... 2>&-` ended in an internal error (sys.stderr None) whose traceback went down
    the watcher's pipe, which had taken descriptor 2."""
    process = pagecheck("tolerance", "--quick", "--out", "out", cwd=tmp_path, stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                        preexec_fn=lambda: [os.close(fd) for fd in closed])  # fmt: skip
    assert process.wait(timeout=300) == ExitCode.OK
    assert (tmp_path / "out" / "tolerance.json").is_file()


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
    """A process the command starts neither sees the pipe's variable nor inherits its descriptor; each line
    carries the watcher's token, and a status goes out once."""
    read_end, write_end = os.pipe()
    monkeypatch.setenv(supervisor.RESULT_FD_ENV, f"{write_end},{os.getppid()},tok123")
    monkeypatch.setattr(supervisor, "_die_with", lambda watcher: None)
    try:
        supervisor.become_child()
        supervisor.unblock_interrupts()
        assert supervisor.RESULT_FD_ENV not in os.environ and not os.get_inheritable(write_end)
        seen = subprocess.run([sys.executable, "-c", f"import os; os.fstat({write_end})"], capture_output=True)
        assert seen.returncode != 0  # closed in the grandchild
        supervisor.send_result(4)
        assert os.read(read_end, 64) == b"tok123 4\n"
        supervisor.send_result(0)  # once only: the descriptor is closed and forgotten
    finally:
        os.close(read_end)
        monkeypatch.setattr(supervisor, "_result_fd", None)


@pytest.mark.parametrize("value", ["1,1,t", "0,{ppid},t", "99,{ppid},t", "{fd},{ppid}", "garbage"])
def test_a_result_variable_that_names_no_pipe_from_the_parent_is_ignored(monkeypatch, value: str) -> None:
    """Set by hand, it made the process kill itself (exit 143, no message) or wrote into stdout."""
    read_end, write_end = os.pipe()
    monkeypatch.setenv(supervisor.RESULT_FD_ENV, value.format(fd=write_end, ppid=os.getppid()))
    monkeypatch.setattr(supervisor, "_die_with", lambda watcher: pytest.fail("armed for a variable it should ignore"))
    try:
        supervisor.become_child()
        assert supervisor._result_fd is None and supervisor.RESULT_FD_ENV not in os.environ
        supervisor.send_result(0)  # nothing to send to
    finally:
        os.close(read_end)
        os.close(write_end)
        monkeypatch.setattr(supervisor, "_result_fd", None)


def test_bytes_that_do_not_carry_the_token_are_no_status(tmp_path: Path) -> None:
    """A subject that wrote "0" to every descriptor and then ended the process got exit 0 and no report."""
    (tmp_path / "forges.py").write_text(
        "import os\nfrom pagecheck.impl import paged_attention as real\n"
        "def paged_attention(*args, **kwargs):\n"
        "    for fd in range(3, 64):\n"
        "        try:\n            os.write(fd, b'0\\n')\n        except OSError:\n            pass\n"
        "    os._exit(0)\n"
    )
    done = run("tolerance", "--quick", "--subject", "forges.py", "--out", "out", cwd=tmp_path)
    assert done.returncode == ExitCode.ENDED_EARLY, done.stderr[-2000:]


def test_a_thread_or_a_process_the_subject_leaves_does_not_hold_the_status(tmp_path: Path) -> None:
    """A non-daemon thread kept the command's process (and so its watcher) alive for ever; a forked helper holding
    the pipe kept the watcher reading until it ended."""
    (tmp_path / "leaves.py").write_text(
        "import os, threading, time\nfrom pagecheck.impl import paged_attention as real\n"
        "threading.Thread(target=time.sleep, args=(90,)).start()\n"
        "if os.fork() == 0:\n    time.sleep(90)\n    os._exit(0)\n"
        "def paged_attention(*args, **kwargs):\n    return real(*args, **kwargs)\n"
    )
    started = time.monotonic()
    with open(tmp_path / "log", "w") as log:  # not a pipe: the forked helper would hold it open
        process = pagecheck("tolerance", "--quick", "--subject", "leaves.py", "--out", "out", cwd=tmp_path,
                            stdout=log, stderr=log, start_new_session=True)
        try:
            code = process.wait(timeout=80)
        finally:
            os.killpg(process.pid, signal.SIGKILL)  # the helper, left in the run's group
    assert code == ExitCode.OK, (tmp_path / "log").read_text()[-2000:]
    assert time.monotonic() - started < 60 and (tmp_path / "out" / "tolerance.json").exists()


def test_a_tolerance_cell_stuck_past_the_hard_stop_keeps_the_cells_before_it(tmp_path: Path) -> None:
    """A call no alarm reaches (SIGALRM ignored, as native code that never returns to Python never runs its
    handler) is ended with the process (faulthandler, a grace after --check-timeout); the sweep wrote
    tolerance.json only at its end, so the cells that had passed were lost."""
    (tmp_path / "stuck.py").write_text(
        "import signal\nimport time\nfrom pagecheck.impl import *  # noqa: F403\n"
        "from pagecheck.impl import paged_attention as _real\ncalls = []\n\n\n"
        "def paged_attention(*args, **kwargs):\n    calls.append(1)\n    if len(calls) == 3:\n"
        "        signal.signal(signal.SIGALRM, signal.SIG_IGN)\n        while True:\n"
        "            time.sleep(1)\n    return _real(*args, **kwargs)\n"
    )  # fmt: skip
    done = run("tolerance", "--quick", "--subject", "stuck.py", "--check-timeout", "0.5", "--out", "out", cwd=tmp_path)
    assert done.returncode == ExitCode.ENDED_EARLY, done.stderr[-2000:]
    document = json.loads((tmp_path / "out" / "tolerance.json").read_text())
    assert document["interrupted"] == {"finished": 2, "planned": 12}
    assert document["totals"]["rows"] == document["totals"]["passed"] == 2 and document["passed"] is False
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["tolerance.json"]


def test_a_subject_that_changes_folder_at_import_does_not_move_the_report(tmp_path: Path) -> None:
    """--out (and the default reports/ folder) resolved against wherever the subject had gone."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "moves.py").write_text(f"import os\nos.chdir({str(tmp_path / 'elsewhere')!r})\n"
                                       "from pagecheck.impl import *  # noqa: F403\n")  # fmt: skip
    done = run("tolerance", "--quick", "--subject", "moves.py", "--out", "out", cwd=tmp_path)
    assert done.returncode == ExitCode.OK, done.stderr[-2000:]
    assert (tmp_path / "out" / "tolerance.json").is_file()
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_a_subject_that_never_finishes_importing_fails_to_load_at_the_time_limit(tmp_path: Path) -> None:
    """tolerance, bench and report loaded the subject with no time limit: a hang at import held them for ever."""
    (tmp_path / "hangs.py").write_text("import time\nwhile True:\n    time.sleep(0.1)\n")
    started = time.monotonic()
    done = run("tolerance", "--quick", "--subject", "hangs.py", "--check-timeout", "1", "--out", "out", cwd=tmp_path)
    assert time.monotonic() - started < 60
    assert done.returncode == ExitCode.SUBJECT_LOAD_FAILED, done.stderr[-2000:]
    assert "ran past --check-timeout 1 s" in done.stderr


def test_a_path_the_output_encoding_cannot_hold_is_escaped_not_an_error(tmp_path: Path) -> None:
    """With PYTHONIOENCODING=ascii the last line ("wrote .../tolerance.md") raised UnicodeEncodeError: exit 9
    after the report was written."""
    process = pagecheck("tolerance", "--quick", "--out", "\u00fc", cwd=tmp_path, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE, env={**os.environ, "PYTHONIOENCODING": "ascii"})  # fmt: skip
    out, err = process.communicate(timeout=300)
    assert process.returncode == ExitCode.OK, err[-2000:]
    assert "\\xfc/tolerance.md" in out and (tmp_path / "\u00fc" / "tolerance.json").is_file()


@pytest.mark.parametrize("launch", ["console", "python-m"])
@pytest.mark.parametrize("args", [["grade", "nothing.py"], ["report", "--help"]], ids=["grade", "report"])
def test_a_folder_named_mlx_where_pagecheck_starts_is_never_imported(tmp_path: Path, args: list[str],
                                                                    launch: str) -> None:  # fmt: skip
    """MLX is a namespace package: a regular package named mlx anywhere on sys.path wins over it, the current
    folder's last place included. Started among the submissions, the grader imported a student's folder named mlx
    into itself (80/80 for a subject that failed every call); any command broke in a folder holding one. Under
    `python -m`, a secrets.py there ran in the watcher (it imports secrets) before any of pagecheck's code."""
    script = Path(sys.executable).parent / "pagecheck"
    if launch == "console" and not script.exists():
        pytest.skip("no console script beside this interpreter")
    marker = tmp_path / "imported"
    (tmp_path / "mlx").mkdir()
    (tmp_path / "mlx" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\nraise ImportError('not MLX')\n")
    (tmp_path / "secrets.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    command = [str(script)] if launch == "console" else [sys.executable, "-m", "pagecheck.cli"]
    done = subprocess.run([*command, *args], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == (ExitCode.USAGE if args[0] == "grade" else 0), done.stderr[-2000:]
    assert not marker.exists()
