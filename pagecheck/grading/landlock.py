"""Landlock through ctypes: a process (and everything it starts) may touch only the paths it is given.

Landlock is a Linux security module that an unprivileged process applies to
itself; it cannot be lifted afterwards. The worker gets: reads (and
executing) under the read paths, reads and writes under the write paths,
/dev/null, no TCP bind or connect (ABI 4), and no signals or abstract Unix
sockets reaching outside its own domain (ABI 6). Rights the running kernel
does not know are left out, and `restrict` says which parts took effect.
"""

from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass

SYS_CREATE_RULESET = 444  # the same number on every architecture Linux added Landlock to
SYS_ADD_RULE = 445
SYS_RESTRICT_SELF = 446
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38

EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
NET_BIND_TCP, NET_CONNECT_TCP = 1 << 0, 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1

# Filesystem rights each ABI version knows.
FS_RIGHTS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1, 5: (1 << 16) - 1}
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # the only rights a rule on a file may hold
READ_RIGHTS = EXECUTE | READ_FILE | READ_DIR
WRITE_RIGHTS = (READ_RIGHTS | WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_DIR | MAKE_REG | MAKE_SOCK | MAKE_FIFO
                | MAKE_SYM | REFER | TRUNCATE)  # fmt: skip


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]  # fmt: skip


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


@dataclass(frozen=True)
class LandlockResult:
    abi: int  # 0: not available
    filesystem: bool
    network: bool
    scoped: bool
    detail: str


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def abi_version() -> int:
    """The Landlock ABI the kernel offers; 0 when it has none (or this is not Linux)."""
    if not sys.platform.startswith("linux"):
        return 0
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    version = libc.syscall(ctypes.c_long(SYS_CREATE_RULESET), None, ctypes.c_size_t(0),
                           ctypes.c_uint32(CREATE_RULESET_VERSION))  # fmt: skip
    return max(0, int(version))


def _add_path(libc: ctypes.CDLL, ruleset: int, path: str, rights: int, handled: int) -> bool:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return False  # a path this machine lacks needs no rule
    try:
        allowed = rights & handled
        if not os.path.isdir(path):
            allowed &= FILE_RIGHTS
        attr = _PathBeneathAttr(allowed, fd)
        done = libc.syscall(ctypes.c_long(SYS_ADD_RULE), ctypes.c_int(ruleset), ctypes.c_int(RULE_PATH_BENEATH),
                            ctypes.byref(attr), ctypes.c_uint32(0))  # fmt: skip
        if done != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule({path}) failed")
        return True
    finally:
        os.close(fd)


def restrict(read_paths: list[str], write_paths: list[str], device_files: list[str],
             thread_names: bool = False) -> LandlockResult:
    """Restrict this process and its future children; call last before exec (no new privileges is set here).
    `thread_names`: its own /proc/self/task files stay writable, where a GPU driver names the threads it starts
    (MLX's CUDA back-end fails to load without it, measured on the H200)."""
    abi = abi_version()
    if abi == 0:
        return LandlockResult(0, False, False, False, "the kernel offers no Landlock")
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    handled_fs = FS_RIGHTS_BY_ABI.get(abi, FS_RIGHTS_BY_ABI[5])
    handled_net = NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0
    attr = _RulesetAttr(handled_fs, handled_net, scoped)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = libc.syscall(ctypes.c_long(SYS_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(size),
                           ctypes.c_uint32(0))  # fmt: skip
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        for path in read_paths:
            _add_path(libc, ruleset, path, READ_RIGHTS, handled_fs)
        for path in write_paths:
            _add_path(libc, ruleset, path, WRITE_RIGHTS, handled_fs)
        for path in device_files:
            _add_path(libc, ruleset, path, READ_FILE | WRITE_FILE | IOCTL_DEV, handled_fs)
        if thread_names:
            _add_path(libc, ruleset, "/proc/self/task", READ_FILE | WRITE_FILE | TRUNCATE, handled_fs)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(ctypes.c_long(SYS_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)
    missing = [what for what, on in (("TCP rules (ABI 4)", handled_net), ("signal and socket scoping (ABI 6)", scoped))
               if not on]  # fmt: skip
    detail = f"ABI {abi}" + (f"; without {', '.join(missing)}" if missing else "")
    return LandlockResult(abi, True, bool(handled_net), bool(scoped), detail)
