"""A seccomp filter through ctypes: the worker starts no process and runs no program, threads excepted, and
has none of the kernel's shared records through which two workers could talk.

Every trap in tripwires.py lives in the worker's own process; a fresh
interpreter started from it (subprocess, os.exec*, posix_spawn, or the same
system calls from native code) would have none of them, nor the worker's
memory limit, which is per process. So before the subject loads the worker
installs, on all its threads (TSYNC), a filter that answers EPERM to execve,
execveat, fork, vfork and any clone without CLONE_THREAD, ENOSYS to clone3
(whose flags a filter cannot read; glibc then falls back to clone for
threads), and EPERM to every system call of another ABI (x32, i386).

Workers may run side by side (other submissions' with --jobs above 1; a
submission's two passes run in turn) as the same user and read the same
library files, so the filter also closes what one worker can change and
another see there (`refuse_shared`; each was tried as a channel, some
carrying the hidden inputs into the public pass's feedback or one
submission's code into another's worker):
- file locks: flock and fcntl's lock commands (F_GETLK, F_SETLK, F_SETLKW and
  their F_OFD_ forms) answer ENOLCK;
- futexes shared by file and offset: a futex wake, requeue or wake-op without
  FUTEX_PRIVATE_FLAG answers EPERM (a shared wait stays allowed: glibc's
  pthread_join waits on a shared futex, and a wait alone tells nothing), and
  futex_waitv, futex_wake, futex_wait and futex_requeue ENOSYS;
- the kernel's key store, whose keys every process of the same user lists
  in /proc/keys: add_key, request_key and keyctl answer ENOSYS;
- file-change notices: inotify_init, inotify_init1, inotify_add_watch and
  fanotify_init answer ENOSYS, fcntl's F_NOTIFY and F_SETLEASE EPERM;
- what is in the page cache: posix_fadvise succeeds without doing anything
  (no page is evicted for another worker to miss), preadv2 and pwritev2
  with RWF_NOWAIT (which fail on a page not in the cache) answer EOPNOTSUPP,
  and io_uring_setup, cachestat and readahead ENOSYS. Timing a read still
  tells a cached page from one that is not, and mincore reports residency
  (refusing it could break a library that probes addresses with it): those
  channels stay, which is why a submission's passes run in turn.
The protocol's descriptors (`keep_fds`: the pipes the worker reads requests
from and writes its replies and reports to) keep the pipe they are: dup2 and
dup3 onto either, close of either and a close_range covering either answer
EPERM. Code of the submission's could otherwise put a pipe of its own under
the reply descriptor's number while it runs (dup2) and put the real one back
before it returns, and every report written meanwhile, a gather's among them,
went into its pipe (tried: 80 of 90 points beyond the course for a dense
gather, against 0 for the same gather unhidden); a closed number is reused by
the next open. fcntl's F_DUPFD never replaces a descriptor and stays allowed.
Once installed it cannot be lifted. Linux on x86_64 and aarch64 only; elsewhere
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
EPERM, ENOLCK, ENOSYS, EOPNOTSUPP = 1, 37, 38, 95
CLONE_THREAD = 0x00010000
FUTEX_PRIVATE_FLAG = 128
# The shared futex operations that stay allowed: FUTEX_WAIT and FUTEX_WAIT_BITSET, each also with
# FUTEX_CLOCK_REALTIME (256).
SHARED_FUTEX_WAITS = (0, 9, 256, 265)
RWF_NOWAIT = 8
X32_BIT = 0x40000000
NEVER = 0xFFFFFFFF  # a system call number no architecture uses: the test of a call that does not exist there
# BPF opcodes: load a word of seccomp_data, compare (equal, greater, at least, any bit set), return
LD_ABS, JEQ, JGT, JGE, JSET, RET = 0x20, 0x15, 0x25, 0x35, 0x45, 0x06
# In struct seccomp_data: the call's number, its ABI, and the low word of an argument (little-endian)
NR_OFFSET, ARCH_OFFSET = 0, 4


def _arg(index: int) -> int:
    return 16 + 8 * index


# machine -> its AUDIT_ARCH and the numbers of the system calls the filter looks at
ARCHES = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
CALLS = {
    "x86_64": {
        "seccomp": 317, "execve": 59, "execveat": 322, "fork": 57, "vfork": 58, "clone": 56, "clone3": 435,
        "fcntl": 72, "flock": 73, "futex": 202, "add_key": 248, "request_key": 249, "keyctl": 250,
        "inotify_init": 253, "inotify_init1": 294, "inotify_add_watch": 254, "fadvise64": 221, "preadv2": 327,
        "pwritev2": 328, "io_uring_setup": 425, "fanotify_init": 300, "readahead": 187, "cachestat": 451,
        "dup2": 33, "dup3": 292, "close": 3, "close_range": 436,
    },
    "aarch64": {
        "seccomp": 277, "execve": 221, "execveat": 281, "fork": NEVER, "vfork": NEVER, "clone": 220, "clone3": 435,
        "fcntl": 25, "flock": 32, "futex": 98, "add_key": 217, "request_key": 218, "keyctl": 219,
        "inotify_init": NEVER, "inotify_init1": 26, "inotify_add_watch": 27, "fadvise64": 223, "preadv2": 286,
        "pwritev2": 287, "io_uring_setup": 425, "fanotify_init": 262, "readahead": 213, "cachestat": 451,
        "dup2": NEVER, "dup3": 24, "close": 57, "close_range": 436,
    },
}
# futex_waitv, futex_wake, futex_wait, futex_requeue: the same numbers on both
FUTEX2_CALLS = (449, 454, 455, 456)
# fcntl's lock commands (the same numbers on both): F_GETLK, F_SETLK, F_SETLKW, F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW
LOCK_COMMANDS = (5, 6, 7, 36, 37, 38)
F_SETLEASE, F_NOTIFY = 1024, 1026


class _Instruction(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Instruction))]


Jump = int | str  # a number of instructions to skip, or the label of a block or a return


def program(machine: str, refuse_shared: bool = True, keep_fds: tuple[int, ...] = ()) -> list[tuple[int, int, int, int]]:
    """The filter for `machine` as (code, jt, jf, k) instructions; KeyError for a machine not in ARCHES. Without
    `refuse_shared`, what workers share (file locks, shared futexes, keys, notices, the page cache) is allowed.
    The descriptors `keep_fds` can be neither replaced (dup2, dup3) nor closed (close, close_range)."""
    nr = CALLS[machine]
    kept: list[tuple[int, Jump, Jump, int]] = [
        (JEQ, "newfd", 0, nr["dup2"]),
        (JEQ, "newfd", 0, nr["dup3"]),
        (JEQ, "close", 0, nr["close"]),
        (JEQ, "closerange", 0, nr["close_range"]),
    ] if keep_fds else []
    # Jump targets are counted from the instruction after the jump, to a return or to a block below.
    shared: list[tuple[int, Jump, Jump, int]] = [
        (JEQ, "nolock", 0, nr["flock"]),
        (JEQ, "fcntl", 0, nr["fcntl"]),
        (JEQ, "futex", 0, nr["futex"]),
        *((JEQ, "enosys", 0, call) for call in FUTEX2_CALLS),
        *((JEQ, "enosys", 0, nr[name]) for name in ("add_key", "request_key", "keyctl", "inotify_init",
                                                    "inotify_init1", "inotify_add_watch", "fanotify_init",
                                                    "io_uring_setup", "cachestat", "readahead")),
        (JEQ, "ignore", 0, nr["fadvise64"]),
        (JEQ, "rwflags", 0, nr["preadv2"]),
        (JEQ, "rwflags", 0, nr["pwritev2"]),
    ] if refuse_shared else []
    body: list[tuple[int, Jump, Jump, int]] = [
        (LD_ABS, 0, 0, ARCH_OFFSET),
        (JEQ, 0, "deny", ARCHES[machine]),
        (LD_ABS, 0, 0, NR_OFFSET),
        (JGE, "deny", 0, X32_BIT),
        (JEQ, "deny", 0, nr["execve"]),
        (JEQ, "deny", 0, nr["execveat"]),
        (JEQ, "deny", 0, nr["fork"]),
        (JEQ, "deny", 0, nr["vfork"]),
        (JEQ, "enosys", 0, nr["clone3"]),
        *kept,
        *shared,
        (JEQ, 0, "allow", nr["clone"]),
        (LD_ABS, 0, 0, _arg(0)),
        (JSET, "allow", "deny", CLONE_THREAD),
    ]
    blocks = {}
    if keep_fds:
        # dup2(old, new) and dup3(old, new, flags): the new descriptor, the second argument; close(fd): the first.
        # The kernel reads each as an unsigned int, the argument's low word.
        for label, argument in (("newfd", 1), ("close", 0)):
            blocks[label] = len(body)
            body += [(LD_ABS, 0, 0, _arg(argument))]
            body += [(JEQ, "deny", 0, fd) for fd in keep_fds[:-1]] + [(JEQ, "deny", "allow", keep_fds[-1])]
        # close_range(first, last, flags) closes (or marks) first..last: refused when that covers a kept one.
        blocks["closerange"] = len(body)
        for i, fd in enumerate(keep_fds):
            past = "allow" if i == len(keep_fds) - 1 else 2  # first > fd: on to the next descriptor
            body += [(LD_ABS, 0, 0, _arg(0)), (JGT, past, 0, fd), (LD_ABS, 0, 0, _arg(1)),
                     (JGE, "deny", "allow" if past == "allow" else 0, fd)]
    if refuse_shared:
        blocks["fcntl"] = len(body)
        body += [(LD_ABS, 0, 0, _arg(1))]
        body += [(JEQ, "nolock", 0, command) for command in LOCK_COMMANDS]
        body += [(JEQ, "deny", 0, F_SETLEASE), (JEQ, "deny", "allow", F_NOTIFY)]
        blocks["futex"] = len(body)
        body += [(LD_ABS, 0, 0, _arg(1)), (JSET, "allow", 0, FUTEX_PRIVATE_FLAG)]
        body += [(JEQ, "allow", 0, op) for op in SHARED_FUTEX_WAITS[:-1]]
        body += [(JEQ, "allow", "deny", SHARED_FUTEX_WAITS[-1])]
        blocks["rwflags"] = len(body)
        body += [(LD_ABS, 0, 0, _arg(5)), (JSET, "eopnotsupp", "allow", RWF_NOWAIT)]
    returns = {"allow": RET_ALLOW, "deny": RET_ERRNO | EPERM, "enosys": RET_ERRNO | ENOSYS,
               "nolock": RET_ERRNO | ENOLCK, "ignore": RET_ERRNO | 0, "eopnotsupp": RET_ERRNO | EOPNOTSUPP}
    where = {**blocks, **{label: len(body) + i for i, label in enumerate(returns)}}
    resolved = []
    for i, (code, jt, jf, k) in enumerate(body):
        jump = [j if isinstance(j, int) else where[j] - i - 1 for j in (jt, jf)]
        if not all(0 <= j <= 255 for j in jump):
            raise ValueError(f"instruction {i} jumps {jump}: past what BPF's 8-bit offsets reach")
        resolved.append((code, jump[0], jump[1], k))
    return resolved + [(RET, 0, 0, value) for value in returns.values()]


def refuse_new_processes(refuse_shared: bool = True, keep_fds: tuple[int, ...] = ()) -> str:
    """Install the filter on every thread of this process: "on: ..." when it holds, "off: why" when it could
    not be installed (the process is then as it was). Without `refuse_shared`, what workers share (file locks,
    shared futexes, keys, notices, the page cache) stays allowed. `keep_fds` are never replaced or closed."""
    machine = os.uname().machine
    if os.uname().sysname != "Linux" or machine not in ARCHES:
        return f"off: no seccomp filter for {os.uname().sysname} on {machine}"
    instructions = program(machine, refuse_shared, tuple(sorted(set(keep_fds))))
    array = (_Instruction * len(instructions))(*(_Instruction(*item) for item in instructions))
    fprog = _Program(len(instructions), array)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return f"off: no_new_privs refused ({os.strerror(ctypes.get_errno())})"
    done = libc.syscall(ctypes.c_long(CALLS[machine]["seccomp"]), ctypes.c_long(SECCOMP_SET_MODE_FILTER),
                        ctypes.c_long(SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(fprog))  # fmt: skip
    if done != 0:
        why = os.strerror(ctypes.get_errno()) if done < 0 else f"thread {done} could not take it"
        return f"off: the seccomp filter was refused ({why})"
    kept = "; the protocol's pipes stay in place" if keep_fds else ""
    return "on (no new process or program; threads only" + kept + (
        "; nothing shared with other workers: no file lock, shared futex wake, key, file notice, page-cache "
        "eviction or non-blocking page probe)" if refuse_shared else ")"
    )
