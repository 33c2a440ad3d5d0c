"""A seccomp filter through ctypes: the worker starts no process and runs no program, threads excepted.

Every trap in tripwires.py lives in the worker's own process; a fresh
interpreter started from it (subprocess, os.exec*, posix_spawn, or the same
system calls from native code) would have none of them, nor the worker's
memory limit, which is per process. So before the subject loads the worker
installs, on all its threads (TSYNC), a filter that answers EPERM to execve,
execveat, fork, vfork and any clone without CLONE_THREAD, ENOSYS to clone3
(whose flags a filter cannot read; glibc then falls back to clone for
threads), and EPERM to every system call of another ABI (x32, i386). It
also answers ENOLCK to file locks (flock, and fcntl's F_GETLK/F_SETLK/F_SETLKW
and their F_OFD_ forms): a lock on a file every worker can read (a library)
is seen by every other worker, the other pass's and other submissions', so
lock positions would carry what one worker saw (the hidden inputs) to
another. For the same reason it answers EPERM to a futex call without
FUTEX_PRIVATE_FLAG (a shared futex is keyed by file and offset, so a wait on
a word of a library every worker maps read-only is woken from another
worker) and ENOSYS to futex_waitv, futex_wake, futex_wait and
futex_requeue, whose private flag a filter cannot always read; threads of
one process use private futexes only. Once installed it cannot be lifted. Linux on x86_64 and aarch64 only; elsewhere
`refuse_new_processes` says why it is off. The worker receives this module's
source over the pipe, so it imports only the standard library.
"""

from __future__ import annotations

import ctypes
import os

PR_SET_NO_NEW_PRIVS = 38
SECCOMP_SET_MODE_FILTER = 1
SECCOMP_FILTER_FLAG_TSYNC = 1
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
EPERM, ENOLCK, ENOSYS = 1, 37, 38
CLONE_THREAD = 0x00010000
FUTEX_PRIVATE_FLAG = 128
X32_BIT = 0x40000000
NEVER = 0xFFFFFFFF  # a system call number no architecture uses: the test of a call that does not exist there
# BPF opcodes: load a word of seccomp_data, compare (equal, at least, any bit set), return
LD_ABS, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06
NR_OFFSET, ARCH_OFFSET, ARG0_OFFSET, ARG1_OFFSET = 0, 4, 16, 24  # in struct seccomp_data (low words, little-endian)
# machine -> (AUDIT_ARCH, seccomp, execve, execveat, fork, vfork, clone, clone3, fcntl, flock, futex)
ARCHES = {
    "x86_64": (0xC000003E, 317, 59, 322, 57, 58, 56, 435, 72, 73, 202),
    "aarch64": (0xC00000B7, 277, 221, 281, NEVER, NEVER, 220, 435, 25, 32, 98),
}
# futex_waitv, futex_wake, futex_wait, futex_requeue: the same numbers on both
FUTEX2_CALLS = (449, 454, 455, 456)
# fcntl's lock commands (the same numbers on both): F_GETLK, F_SETLK, F_SETLKW, F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW
LOCK_COMMANDS = (5, 6, 7, 36, 37, 38)


class _Instruction(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Instruction))]


def program(machine: str, refuse_shared: bool = True) -> list[tuple[int, int, int, int]]:
    """The filter for `machine` as (code, jt, jf, k) instructions; KeyError for a machine not in ARCHES. Without
    `refuse_shared`, file locks and shared futexes are allowed."""
    arch, _, execve, execveat, fork, vfork, clone, clone3, fcntl, flock, futex = ARCHES[machine]
    # Jump targets are counted from the instruction after the jump, to a return or to the fcntl or futex block.
    locks: list[tuple[int, int | str, int | str, int]] = [
        (JEQ, "nolock", 0, flock),
        (JEQ, "fcntl", 0, fcntl),
        (JEQ, "futex", 0, futex),
        *((JEQ, "enosys", 0, call) for call in FUTEX2_CALLS),
    ] if refuse_shared else []
    body: list[tuple[int, int | str, int | str, int]] = [
        (LD_ABS, 0, 0, ARCH_OFFSET),
        (JEQ, 0, "deny", arch),
        (LD_ABS, 0, 0, NR_OFFSET),
        (JGE, "deny", 0, X32_BIT),
        (JEQ, "deny", 0, execve),
        (JEQ, "deny", 0, execveat),
        (JEQ, "deny", 0, fork),
        (JEQ, "deny", 0, vfork),
        (JEQ, "enosys", 0, clone3),
        *locks,
        (JEQ, 0, "allow", clone),
        (LD_ABS, 0, 0, ARG0_OFFSET),
        (JSET, "allow", "deny", CLONE_THREAD),
    ]
    blocks = {}
    if refuse_shared:
        blocks["fcntl"] = len(body)
        body += [(LD_ABS, 0, 0, ARG1_OFFSET)]
        body += [(JEQ, "nolock", 0, command) for command in LOCK_COMMANDS[:-1]]
        body += [(JEQ, "nolock", "allow", LOCK_COMMANDS[-1])]
        blocks["futex"] = len(body)
        body += [(LD_ABS, 0, 0, ARG1_OFFSET), (JSET, "allow", "deny", FUTEX_PRIVATE_FLAG)]
    returns = {"allow": RET_ALLOW, "deny": RET_ERRNO | EPERM, "enosys": RET_ERRNO | ENOSYS,
               "nolock": RET_ERRNO | ENOLCK}  # fmt: skip
    where = {**blocks, **{label: len(body) + i for i, label in enumerate(returns)}}
    resolved = []
    for i, (code, jt, jf, k) in enumerate(body):
        jump = [j if isinstance(j, int) else where[j] - i - 1 for j in (jt, jf)]
        resolved.append((code, jump[0], jump[1], k))
    return resolved + [(RET, 0, 0, value) for value in returns.values()]


def refuse_new_processes(refuse_shared: bool = True) -> str:
    """Install the filter on every thread of this process: "on: ..." when it holds, "off: why" when it could
    not be installed (the process is then as it was). Without `refuse_shared` file locks and shared futexes stay
    allowed."""
    machine = os.uname().machine
    if os.uname().sysname != "Linux" or machine not in ARCHES:
        return f"off: no seccomp filter for {os.uname().sysname} on {machine}"
    instructions = program(machine, refuse_shared)
    array = (_Instruction * len(instructions))(*(_Instruction(*item) for item in instructions))
    fprog = _Program(len(instructions), array)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return f"off: no_new_privs refused ({os.strerror(ctypes.get_errno())})"
    done = libc.syscall(ctypes.c_long(ARCHES[machine][1]), ctypes.c_long(SECCOMP_SET_MODE_FILTER),
                        ctypes.c_long(SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(fprog))  # fmt: skip
    if done != 0:
        why = os.strerror(ctypes.get_errno()) if done < 0 else f"thread {done} could not take it"
        return f"off: the seccomp filter was refused ({why})"
    return "on (no new process or program; threads only" + ("; no file locks, no shared futexes)" if refuse_shared else ")")
