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
import secrets
import signal
import stat
import subprocess
import sys
import time

from pagecheck.exit_codes import ExitCode
from pagecheck.python_child import module_command

# The child's end of the result pipe, the watcher's process id and a token for its lines, "FD,PID,TOKEN", in
# the child's environment.
RESULT_FD_ENV = "PAGECHECK_RESULT_FD"
# Signals the watcher takes over while the child runs: blocked, then read with sigtimedwait.
WATCHED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD)
# si_code of a signal the kernel itself sent, as a terminal's Ctrl-C (include/uapi/asm-generic/siginfo.h).
SI_KERNEL = 0x80
# prctl's PR_SET_PDEATHSIG: the child is sent SIGTERM if the watcher dies first (include/uapi/linux/prctl.h).
PR_SET_PDEATHSIG = 1

# What the child sends once it has parsed its command line and is about to run the command.
STARTED = "started"

# How long a command's process may live on after it sent its status (a thread a subject left running) before
# the watcher ends it.
LINGER_S = 10.0

# Where this process is the watched child: the pipe's write end, taken out of the environment at start, the
# watcher's token, and the pipe's identity (device, inode) to write only to it.
_result_fd: int | None = None
_token = ""
_pipe_id: tuple[int, int] = (0, 0)


def can_watch() -> bool:
    """Whether this platform gives what the watcher needs (sigtimedwait with si_code: Linux)."""
    return sys.platform.startswith("linux") and hasattr(signal, "sigtimedwait")


def wanted() -> bool:
    """Whether this process should start the command as a watched child: a console run on Linux that is not
    itself such a child."""
    return can_watch() and _result_fd is None and _result_pipe(os.environ.get(RESULT_FD_ENV, "")) is None


def watch(args: list[str], command: str) -> int:
    """Run `python -m pagecheck.cli ARGS` as a child and return its exit status (see the module's note)."""
    read_end, write_end = os.pipe()
    token = secrets.token_hex(8)  # the child's lines carry it: other bytes on the pipe are no status
    env = dict(os.environ, **{RESULT_FD_ENV: f"{write_end},{os.getpid()},{token}"})
    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)
    try:
        # grade imports nothing from the folder it starts in (pagecheck.cli says why).
        child = subprocess.Popen(module_command("pagecheck.cli", *args, folder=command != "grade"), env=env,
                                 pass_fds=(write_end,))  # fmt: skip
    except BaseException:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
        os.close(read_end)
        os.close(write_end)
        raise
    os.close(write_end)
    os.set_blocking(read_end, False)
    received = b""
    status_at: float | None = None
    try:
        while child.poll() is None:
            info = signal.sigtimedwait(WATCHED, 0.5)
            received += _available(read_end)
            if status_at is None and _status(received, token) is not None:
                status_at = time.monotonic()
            if status_at is not None and time.monotonic() - status_at > LINGER_S:
                # The command finished and said so; what keeps its process alive (a thread a subject left) does
                # not hold the command's status.
                child.kill()
                child.wait()
                break
            if info is None or info.si_signo == signal.SIGCHLD:
                continue
            if info.si_code == SI_KERNEL:
                continue  # a terminal's Ctrl-C or hang-up: the child, in the same group, has it too
            child.send_signal(info.si_signo)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
    # Whatever the child wrote before it ended; a process it left behind may hold the pipe open, so no waiting.
    received += _available(read_end)
    os.close(read_end)
    status = _status(received, token)
    if status is not None:
        return status
    return ended_early(command, child.returncode, started=f"{token} {STARTED}".encode() in received)


def _available(fd: int) -> bytes:
    """What the non-blocking pipe holds now (at most what a status needs, many times over)."""
    chunks = b""
    while len(chunks) < 1 << 16:
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks += chunk
    return chunks


def _status(received: bytes, token: str) -> int | None:
    """The exit status the child sent (its line "TOKEN STATUS"), or None."""
    for line in received.decode("ascii", "replace").splitlines():
        words = line.split()
        if len(words) == 2 and words[0] == token and words[1].lstrip("-").isdigit():
            return int(words[1])
    return None


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
    print(f"{name}: the command's process ended with status {returncode} before pagecheck sent its result: code "
          "running in it (the subject's, most likely) ended it (os._exit or sys.exit at its import or inside a "
          "call, or a stuck call's hard stop after --check-timeout; see above), or closed the result pipe; nothing "
          "it reported can be trusted", file=sys.stderr)
    return int(ExitCode.ENDED_EARLY)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def become_child() -> None:
    """At the child's start: take the result pipe out of the environment (so that no process this one starts
    sees it), keep it from being inherited, and ask for SIGTERM if the watcher dies first. A variable that names
    no pipe from a live parent (set by hand, say) is ignored. SIGINT, SIGTERM and SIGHUP stay blocked until the
    command's handlers are in place (unblock_interrupts); SIGCHLD is unblocked now."""
    global _result_fd, _token, _pipe_id
    pipe = _result_pipe(os.environ.pop(RESULT_FD_ENV, ""))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
    if pipe is None:
        unblock_interrupts()
        return
    fd, watcher, token, facts = pipe
    try:
        os.set_inheritable(fd, False)
    except OSError:
        unblock_interrupts()
        return
    _result_fd, _token, _pipe_id = fd, token, (facts.st_dev, facts.st_ino)
    _die_with(watcher)


def _result_pipe(value: str) -> tuple[int, int, str, os.stat_result] | None:
    """(fd, watcher pid, token, the pipe's stat) where RESULT_FD_ENV's value names a pipe open here from a watcher
    that is this process's parent; None for anything else (unset, or set by hand: the watcher is then wanted)."""
    fd, watcher, token = (value.split(",") + ["", "", ""])[:3]
    if not (fd.isdigit() and watcher.isdigit() and token) or int(watcher) != os.getppid():
        return None
    try:
        facts = os.fstat(int(fd))
    except OSError:
        return None
    return (int(fd), int(watcher), token, facts) if stat.S_ISFIFO(facts.st_mode) else None


def unblock_interrupts() -> None:
    """Let SIGINT, SIGTERM and SIGHUP in (held while the child started: one then would end it mid-import)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


def _die_with(watcher: int) -> None:
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != watcher:  # the watcher died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _send(text: str) -> bool:
    """Write "TOKEN TEXT" to the result pipe, if it is still the pipe the watcher gave (code in this process may
    have closed it, or put another file in its place)."""
    if _result_fd is None:
        return False
    try:
        facts = os.fstat(_result_fd)
        if (facts.st_dev, facts.st_ino) != _pipe_id:
            return False
        os.write(_result_fd, f"{_token} {text}\n".encode("ascii"))
        return True
    except OSError:
        return False


def send_started() -> None:
    """The child has parsed its command line and begins the command (from here, a subject's code may run)."""
    _send(STARTED)


def send_result(code: int) -> None:
    """The child's last act: its exit status, for the watcher. Does nothing in an unwatched process."""
    global _result_fd
    if _send(str(int(code))) and _result_fd is not None:
        try:
            os.close(_result_fd)
        except OSError:
            pass
    _result_fd = None
