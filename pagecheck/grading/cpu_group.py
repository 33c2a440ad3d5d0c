"""Which CPU cgroup the kernel schedules this process in: the root one, or one below it.

Trusted code, standard library only. The kernel's autogroup scheduling (one group per session) applies only
to tasks of the root CPU task group; a task in any other CPU cgroup is scheduled in that cgroup's group, and
its session's autogroup, though /proc/<pid>/autogroup still names one, changes nothing. So the launcher asks
here before it reports the protection `cpu_share` on.

How each cgroup version tells it, read from /proc/self/cgroup, /proc/self/mountinfo and the cgroup folders:

    version 1   the hierarchy that holds the `cpu` controller; the process's folder in it is the root one
                when it holds cgroup.sane_behavior, which the kernel shows in the real root only (so a
                cgroup namespace's "/" is still seen to be below it)
    version 2   the CPU group is the nearest folder, from the process's own up to the mount, that holds
                cpu.weight (present where the cpu controller is enabled, never in the root); where none
                does and the mount is the real root (it has no cgroup.type), the process is in the root
                group; where the mount is some cgroup below the root, the folders above it are out of
                sight and the answer is unknown
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Placement:
    """root: True in the root CPU group, False below it, None where it cannot be told; detail: why, for a
    person."""

    root: bool | None
    detail: str


def placement(proc_self: str = "/proc/self") -> Placement:
    """Where the kernel schedules the process whose /proc folder is `proc_self` (this one by default)."""
    memberships = read_text(os.path.join(proc_self, "cgroup"))
    mounts = read_text(os.path.join(proc_self, "mountinfo"))
    if memberships is None or mounts is None:
        return Placement(None, f"{proc_self}/cgroup or {proc_self}/mountinfo is unreadable")
    v1_path, v2_path = None, None
    for line in memberships.splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if number == "0" and not controllers:
            v2_path = path
        elif "cpu" in controllers.split(","):
            v1_path = path
    if v1_path is not None:
        return _version_1(v1_path, _mounts(mounts))
    if v2_path is not None:
        return _version_2(v2_path, _mounts(mounts))
    return Placement(None, "the process belongs to no cgroup hierarchy with the cpu controller")


def _version_1(path: str, mounts: list[tuple[str, str, str, set[str]]]) -> Placement:
    for root, point, kind, options in mounts:
        if kind == "cgroup" and "cpu" in options:
            folder = _folder(point, root, path)
            if folder is None or not os.path.isdir(folder):
                return Placement(None, f"the CPU cgroup {path} is not visible under the mount {point}")
            if os.path.exists(os.path.join(folder, "cgroup.sane_behavior")):
                return Placement(True, f"the root CPU cgroup ({folder})")
            return Placement(False, f"the CPU cgroup {path} ({folder}), below the root")
    return Placement(None, f"the CPU cgroup {path} is not mounted")


def _version_2(path: str, mounts: list[tuple[str, str, str, set[str]]]) -> Placement:
    for root, point, kind, _ in mounts:
        if kind != "cgroup2":
            continue
        folder = _folder(point, root, path)
        if folder is None or not os.path.isdir(folder):
            continue
        top = os.path.normpath(point)
        while True:
            if os.path.exists(os.path.join(folder, "cpu.weight")):
                return Placement(False, f"the CPU cgroup {folder}, below the root (it holds cpu.weight)")
            if os.path.normpath(folder) == top:
                break
            folder = os.path.dirname(folder)
        if os.path.exists(os.path.join(top, "cgroup.type")):
            return Placement(None, f"the cgroup mount {point} is itself below the root, and whether a cgroup "
                                   "above it runs the cpu controller is out of sight")  # fmt: skip
        return Placement(True, f"the root CPU cgroup (no cgroup from {path} up to the root runs the cpu controller)")
    return Placement(None, f"the cgroup {path} is not visible under any cgroup2 mount")


def _folder(point: str, root: str, path: str) -> str | None:
    """The folder of cgroup `path` under a mount of cgroup `root` at `point`; None where it lies outside it."""
    root = root.rstrip("/")
    if path != root and not path.startswith(root + "/"):
        return None
    inside = path[len(root) :].strip("/")
    return os.path.join(point, inside) if inside else point


def _mounts(mountinfo: str) -> list[tuple[str, str, str, set[str]]]:
    """(mount root, mount point, file system type, super options) for each line of a mountinfo file."""
    rows = []
    for line in mountinfo.splitlines():
        head, _, tail = line.partition(" - ")
        fields, extra = head.split(), tail.split()
        if len(fields) < 5 or len(extra) < 3:
            continue
        rows.append((_unescape(fields[3]), _unescape(fields[4]), extra[0], set(extra[2].split(","))))
    return rows


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), field)


def read_text(path: str) -> str | None:
    """A file's text (of /proc or /sys); None where it cannot be read."""
    try:
        with open(path) as file:
            return file.read()
    except OSError:
        return None
