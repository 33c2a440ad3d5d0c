"""Linux namespaces and mounts through ctypes, for the sandbox launcher.

Only what launcher.py needs: unshare, the user namespace's id maps, and the
mounts that shape what the worker sees: a private mount tree, a tmpfs of
fixed size as its scratch folder, a fresh /proc for its PID namespace, empty
read-only mounts over folders it must not read, and `cover`, which lays a
fresh tmpfs over a folder while keeping chosen paths below it visible (so a
Python installed under a folder closed to others, like /root, stays usable
after the worker drops to an unprivileged user).
"""

from __future__ import annotations

import ctypes
import os
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_MOVE = 8192
MS_REC = 16384
MS_PRIVATE = 1 << 18

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def unshare(flags: int) -> None:
    _check(_libc().unshare(ctypes.c_int(flags)), f"unshare({flags:#x})")


def prctl(option: int, value: int) -> None:
    _check(_libc().prctl(option, value, 0, 0, 0), f"prctl({option})")


def write_id_maps(inside_uid: int, outside_uid: int, inside_gid: int, outside_gid: int) -> None:
    """Map one uid and one gid into the user namespace this process just created."""
    with open("/proc/self/setgroups", "w") as file:
        file.write("deny")
    with open("/proc/self/uid_map", "w") as file:
        file.write(f"{inside_uid} {outside_uid} 1")
    with open("/proc/self/gid_map", "w") as file:
        file.write(f"{inside_gid} {outside_gid} 1")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = lambda text: None if text is None else text.encode()  # noqa: E731
    result = _libc().mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data))
    _check(result, f"mount({source!r}, {target!r}, {fstype!r})")


def make_private() -> None:
    """Mounts made from here on stay in this mount namespace."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)


def mount_tmpfs(target: str, *, size_bytes: int, mode: int, uid: int | None = None, gid: int | None = None,
                flags: int = MS_NOSUID | MS_NODEV) -> None:  # fmt: skip
    options = f"size={size_bytes},mode={mode:o}"
    if uid is not None and gid is not None:
        options += f",uid={uid},gid={gid}"
    mount("tmpfs", target, "tmpfs", flags, options)


def mount_proc() -> None:
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)


def hide(path: str) -> None:
    """An empty, read-only, unreadable folder (or /dev/null for a file) in place of `path`."""
    if os.path.isdir(path):
        mount_tmpfs(path, size_bytes=4096, mode=0o000, flags=MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY)
    elif os.path.exists(path):
        mount("/dev/null", path, None, MS_BIND)


def cover(directory: str, keep: list[str], stage: str, *, size_bytes: int = 1 << 20) -> None:
    """A fresh tmpfs (mode 0755, read-only once done) over `directory`; each path in `keep` below it is bound
    back at the same place. `stage` is an empty folder outside `directory` to hold the binds meanwhile."""
    held = []
    for index, path in enumerate(keep):
        spot = os.path.join(stage, str(index))
        os.makedirs(spot, exist_ok=True)
        if os.path.isdir(path):
            mount(path, spot, None, MS_BIND | MS_REC)
        else:
            os.rmdir(spot)
            open(spot, "w").close()
            mount(path, spot, None, MS_BIND)
        held.append((path, spot))
    mount_tmpfs(directory, size_bytes=size_bytes, mode=0o755)
    for path, spot in held:
        if os.path.isdir(spot):
            os.makedirs(path, mode=0o755, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
            open(path, "w").close()
        mount(spot, path, None, MS_MOVE)
    for _, spot in held:
        if os.path.isdir(spot):
            os.rmdir(spot)
        else:
            os.unlink(spot)
    mount(None, directory, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def blocked_ancestor(path: str) -> str | None:
    """The highest folder on the way to `path` that a stranger (neither owner nor group) cannot pass."""
    parts = os.path.realpath(path).split(os.sep)[1:]
    current = ""
    for part in parts[:-1] if not os.path.isdir(path) else parts:
        current = f"{current}/{part}"
        try:
            mode = os.stat(current).st_mode
        except OSError:
            return None
        if not mode & 0o001:
            return current
    return None


def is_linux() -> bool:
    return sys.platform.startswith("linux")
