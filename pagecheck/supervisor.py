"""The `pagecheck` command's watcher: each command runs in a child process that vouches for its exit status.

A subject's code runs inside the command's own process (the tolerance sweep,
the benchmark's checks, report's stages that import it). Code there can end
that process at any moment: `os._exit(0)`, `sys.exit(0)` from inside a call,
a crash in C, the kernel's out-of-memory killer. Ended by `os._exit(0)`,
`pagecheck tolerance` would return status 0 with no report at all, a success
nobody earned. So the console script (and `python -m pagecheck.cli`) starts
the command as a child, `python -m pagecheck.cli ...` with RESULT_FD_ENV
naming a pipe, and the child's last act is to write its exit status there
(send_result). The watcher returns that status. A child that ends without
writing it ended early: the watcher says how on stderr and returns
ENDED_EARLY, or 128 + N for a child killed by signal N.

Signals: SIGTERM and SIGHUP sent to the watcher are passed on to the child.
A terminal's Ctrl-C reaches both (they share the foreground process group),
so a SIGINT the kernel sent is left to the child; one sent by a process
(`kill -INT`) is passed on. Telling the two apart needs sigtimedwait's
si_code, which only Linux gives Python, so elsewhere the command runs in one
process, unwatched, as before.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from pagecheck.exit_codes import ExitCode

# The child's end of the result pipe and the watcher's process id, "FD,PID", in the child's environment.
RESULT_FD_ENV = "PAGECHECK_RESULT_FD"
# Signals the watcher takes over while the child runs: blocked, then read with sigtimedwait.
WATCHED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD)
# si_code of a signal the kernel itself sent, as a terminal's Ctrl-C (include/uapi/asm-generic/siginfo.h).
SI_KERNEL = 0x80
# prctl's PR_SET_PDEATHSIG: the child is sent SIGTERM if the watcher dies first (include/uapi/linux/prctl.h).
PR_SET_PDEATHSIG = 1

# The child: `pagecheck.cli`'s main, started without the current folder first on sys.path (where `python -m`
# and `-c` put it), so that a student's random.py there does not stand in for the standard library's.
CHILD_CODE = (
    "import sys\n"
    "if sys.path and sys.path[0] == '':\n"
    "    del sys.path[0]\n"
    "from pagecheck.cli import main\n"
    "sys.exit(main())\n"
)
# What the child sends once it has parsed its command line and is about to run the command.
STARTED = "started"

# Where this process is the watched child: the pipe's write end, taken out of the environment at start.
_result_fd: int | None = None


def can_watch() -> bool:
    """Whether this platform gives what the watcher needs (sigtimedwait with si_code: Linux)."""
    return sys.platform.startswith("linux") and hasattr(signal, "sigtimedwait")


def wanted() -> bool:
    """Whether this process should start the command as a watched child: a console run on Linux that is not
    itself such a child."""
    return can_watch() and RESULT_FD_ENV not in os.environ and _result_fd is None


def watch(args: list[str], command: str) -> int:
    """Run `python -m pagecheck.cli ARGS` as a child and return its exit status (see the module's note)."""
    read_end, write_end = os.pipe()
    env = dict(os.environ, **{RESULT_FD_ENV: f"{write_end},{os.getpid()}"})
    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)
    try:
        child = subprocess.Popen([sys.executable, "-c", CHILD_CODE, *args], env=env, pass_fds=(write_end,))
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
        os.close(read_end)
        os.close(write_end)
        raise
    os.close(write_end)
    try:
        while child.poll() is None:
            info = signal.sigtimedwait(WATCHED, 1.0)
            if info is None or info.si_signo == signal.SIGCHLD:
                continue
            if info.si_code == SI_KERNEL:
                continue  # a terminal's Ctrl-C or hang-up: the child, in the same group, has it too
            child.send_signal(info.si_signo)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
    with os.fdopen(read_end, "rb") as pipe:
        sent = pipe.read().decode("ascii", "replace").split()
    statuses = [word for word in sent if word.lstrip("-").isdigit()]
    if statuses:
        return int(statuses[-1])
    return ended_early(command, child.returncode, started=STARTED in sent)


def ended_early(command: str, returncode: int, *, started: bool = True) -> int:
    """The watcher's status for a child that ended without sending its own, with one line on stderr. `started`:
    whether the child had begun the command (after that, code of the subject's may have run in it)."""
    name = f"pagecheck {command}" if command else "pagecheck"
    if returncode < 0:
        print(f"{name}: the command's process was killed by {_signal_name(-returncode)} before it finished"
              + (" (out of memory?)" if -returncode == signal.SIGKILL else ""), file=sys.stderr)
        return 128 - returncode
    if not started:
        print(f"{name}: the command's process ended with status {returncode} before it began the command; the "
              "error above says why", file=sys.stderr)
        return returncode or int(ExitCode.INTERNAL_ERROR)
    print(f"{name}: the command's process ended with status {returncode} before pagecheck finished: code running "
          "in it (the subject's, most likely) ended it, with os._exit or sys.exit at its import or inside a call; "
          "nothing it reported can be trusted", file=sys.stderr)
    return int(ExitCode.ENDED_EARLY)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def become_child() -> None:
    """At the child's start: take the result pipe out of the environment (so that no process this one starts
    sees it), keep it from being inherited, unblock the signals the watcher blocked, and ask for SIGTERM if
    the watcher dies first."""
    global _result_fd
    fd, _, watcher = os.environ.pop(RESULT_FD_ENV, "").partition(",")
    if not (fd.isdigit() and watcher.isdigit()):
        return
    _result_fd = int(fd)
    try:
        os.set_inheritable(_result_fd, False)
    except OSError:  # not open: the result cannot be sent, and the watcher will say so
        _result_fd = None
    signal.pthread_sigmask(signal.SIG_UNBLOCK, WATCHED)
    _die_with(int(watcher))


def _die_with(watcher: int) -> None:
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != watcher:  # the watcher died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


def send_started() -> None:
    """The child has parsed its command line and begins the command (from here, a subject's code may run)."""
    if _result_fd is not None:
        try:
            os.write(_result_fd, f"{STARTED}\n".encode("ascii"))
        except OSError:
            pass


def send_result(code: int) -> None:
    """The child's last act: its exit status, for the watcher. Does nothing in an unwatched process."""
    global _result_fd
    if _result_fd is None:
        return
    fd, _result_fd = _result_fd, None
    try:
        os.write(fd, f"{int(code)}\n".encode("ascii"))
        os.close(fd)
    except OSError:
        pass
