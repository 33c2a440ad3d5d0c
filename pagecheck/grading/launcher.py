"""The sandbox launcher: `python -m pagecheck.grading.launcher CONFIG_FD` builds the sandbox and runs one program in it.

Trusted code, standard library only. It reads its settings (a JSON object,
see LaunchConfig) from CONFIG_FD, then, on Linux, with what the kernel lends:

    launcher                  new mount, PID, network, IPC and UTS namespaces (and a user
    |                         namespace unless it runs as root); a private mount tree; a tmpfs
    |                         of `disk_bytes` as the scratch folder, the submission copied in;
    |                         the harness's folders and the grader's output hidden under empty
    |                         mounts; folders closed to others covered so Python stays readable
    +-- init (PID 1)          a fresh /proc; as root: drops to `nobody` and enters a user
        |                     namespace of its own (which gives the process limit its own
        |                     count); reaps every process; reports the program's end on the
        |                     status pipe; its exit ends everything left in the namespace
        +-- program           a session of its own; rlimits (address space, CPU seconds,
                              processes, file size, open files, no core files); Landlock; no
                              new privileges; then exec: the worker, or a build command

Each step that the system refuses is skipped and reported: the status pipe
gets {"protections": {...}} first, and {"exit": ...} when the program ends.
In command mode init then streams the submission folder back as a tar
archive on the output pipe (a build's products), and the grader unpacks it.
Exit status of the launcher: the program's (128 + signal when a signal ended
it), or SETUP_FAILED when the sandbox could not be built.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import stat
import sys
import tarfile
from dataclasses import dataclass, field
from typing import Any

from pagecheck.grading import cpu_group, landlock, namespaces
from pagecheck.grading.limits import MEMORY_RLIMITS

SETUP_FAILED = 120
NOBODY = "nobody"
SUBMISSION_DIR = "submission"  # below the scratch folder
STAGE_DIR = ".mounts"
COPY_SKIPPED_KINDS = (stat.S_IFLNK, stat.S_IFSOCK, stat.S_IFIFO, stat.S_IFCHR, stat.S_IFBLK)
DEVICE_FILES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")
SCRATCH_PLACEHOLDER = "{scratch}"
MAX_COPY_BYTES = 1 << 30
PR_SET_DUMPABLE = 4
LEAVABLE = ("namespaces", "landlock", "unprivileged_user")


@dataclass(frozen=True)
class LaunchConfig:
    argv: list[str]  # the program; SCRATCH_PLACEHOLDER in any argument is replaced
    env: dict[str, str]
    scratch_mountpoint: str  # where the scratch tmpfs is mounted (a folder that exists)
    fallback_scratch: str  # the scratch folder used when no mount namespace is available
    copy_in: str | None  # a folder whose contents become SCRATCH/submission
    read_paths: list[str]
    hide_paths: list[str]
    memory_bytes: int
    cpu_seconds: int
    max_processes: int
    max_file_bytes: int
    disk_bytes: int
    max_open_files: int = 256
    pass_fds: list[int] = field(default_factory=list)  # kept open for the program (the protocol pipe)
    status_fd: int = -1  # written by init only
    output_fd: int = -1  # command mode: the submission folder comes back on it as a tar stream
    device_paths: list[str] = field(default_factory=list)  # extra device files (a GPU's), read-write
    workdir: str = ""  # where the program starts, relative to the scratch folder
    leave_off: list[str] = field(default_factory=list)  # of LEAVABLE: to see what a machine without them gets
    # "data": memory_bytes caps RLIMIT_DATA, not RLIMIT_AS (MLX's CUDA back-end reserves more address space than
    # any useful limit); with a GPU's device files, also its own thread names writable (CUDA names its threads)
    memory_kind: str = "address_space"

    @staticmethod
    def from_json(text: str) -> "LaunchConfig":
        return LaunchConfig(**json.loads(text))


class Protections:
    """What the sandbox achieved: name -> "on" or "off: why"; written to the status pipe as it is known."""

    def __init__(self) -> None:
        self.state: dict[str, str] = {}

    def on(self, name: str, how: str = "") -> None:
        self.state[name] = "on" + (f" ({how})" if how else "")

    def off(self, name: str, why: str) -> None:
        self.state[name] = f"off: {why}"


def read_status(fd: int) -> tuple[dict[str, str], dict[str, Any]]:
    """Everything the launcher wrote to its status pipe, read to the end (the fd is closed): the last
    protections it reported, and the last other report (how the program ended). Lines that are not a JSON
    object are skipped."""
    text = b""
    while chunk := os.read(fd, 1 << 16):
        text += chunk
    os.close(fd)
    protections: dict[str, str] = {}
    report: dict[str, Any] = {}
    for line in text.decode("utf-8", "replace").splitlines():
        try:
            document = json.loads(line)
        except ValueError:
            continue
        if isinstance(document, dict) and "protections" in document:
            protections = {str(k): str(v) for k, v in dict(document["protections"]).items()}
        elif isinstance(document, dict):
            report = document
    return protections, report


def _write_status(fd: int, document: dict[str, Any]) -> None:
    if fd < 0:
        return
    data = (json.dumps(document) + "\n").encode()
    try:
        while data:
            data = data[os.write(fd, data) :]
    except OSError:
        pass


def _copy_tree(source: str, target: str) -> None:
    """Regular files and folders only (no links, devices or sockets), at most MAX_COPY_BYTES."""
    copied = 0
    for root, dirs, files in os.walk(source):
        relative = os.path.relpath(root, source)
        destination = os.path.normpath(os.path.join(target, relative))
        os.makedirs(destination, exist_ok=True)
        for name in files:
            path = os.path.join(root, name)
            info = os.lstat(path)
            if stat.S_IFMT(info.st_mode) in COPY_SKIPPED_KINDS or not stat.S_ISREG(info.st_mode):
                continue
            copied += info.st_size
            if copied > MAX_COPY_BYTES:
                raise OSError(f"the submission is over {MAX_COPY_BYTES} bytes")
            shutil.copyfile(path, os.path.join(destination, name), follow_symlinks=False)
            os.chmod(os.path.join(destination, name), 0o755 if info.st_mode & 0o111 else 0o644)
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]


def _chown_tree(path: str, uid: int, gid: int) -> None:
    os.chown(path, uid, gid)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.chown(os.path.join(root, name), uid, gid, follow_symlinks=False)


def _nobody() -> tuple[int, int]:
    import pwd

    entry = pwd.getpwnam(NOBODY)
    return entry.pw_uid, entry.pw_gid


def _enter_namespaces(config: LaunchConfig, protections: Protections, as_root: bool) -> bool:
    """Unshare; True when a mount namespace (and so the scratch tmpfs) is available."""
    if not namespaces.is_linux() or "namespaces" in config.leave_off:
        why = f"{sys.platform} has no Linux namespaces" if not namespaces.is_linux() else "left off by the settings"
        for name in ("network_namespace", "mount_namespace", "user_namespace"):
            protections.off(name, why)
        protections.off("pid_namespace", f"{why}; a process the submission detaches may outlive it")
        return False
    base = namespaces.CLONE_NEWNS | namespaces.CLONE_NEWPID | namespaces.CLONE_NEWNET | namespaces.CLONE_NEWIPC
    attempts = [base | namespaces.CLONE_NEWUTS] if as_root else [base | namespaces.CLONE_NEWUTS | namespaces.CLONE_NEWUSER]
    uid, gid = os.getuid(), os.getgid()
    for flags in attempts:
        try:
            namespaces.unshare(flags)
        except OSError as exc:
            reason = f"unshare refused ({exc.strerror or exc})"
            for name in ("network_namespace", "mount_namespace"):
                protections.off(name, reason)
            protections.off("pid_namespace", f"{reason}; a process the submission detaches may outlive it")
            if not as_root:
                protections.off("user_namespace", reason)
            return False
        if flags & namespaces.CLONE_NEWUSER:
            namespaces.write_id_maps(uid, uid, gid, gid)
            protections.on("user_namespace")
        protections.on("pid_namespace")
        protections.on("network_namespace", "an empty one: no interface is up")
        protections.on("mount_namespace")
    return True


def _prepare_mounts(config: LaunchConfig, scratch: str, protections: Protections, owner: tuple[int, int] | None) -> None:
    namespaces.make_private()
    inside = [p for p in config.read_paths if os.path.exists(p) and _below(p, scratch)]
    if inside:
        raise OSError(f"{inside[0]} lies below the scratch mount point {scratch}; it would be hidden")
    uid, gid = owner if owner is not None else (os.getuid(), os.getgid())
    # Opened before the tmpfs goes up: the folder may lie below the mount point, and stays reachable through
    # its descriptor once the tmpfs hides it.
    source = os.open(config.copy_in, os.O_RDONLY | os.O_DIRECTORY) if config.copy_in else -1
    namespaces.mount_tmpfs(scratch, size_bytes=config.disk_bytes, mode=0o700, uid=uid, gid=gid)
    protections.on("disk_quota", f"a tmpfs of {config.disk_bytes >> 20} MiB")
    if source >= 0:
        _copy_tree(f"/proc/self/fd/{source}", os.path.join(scratch, SUBMISSION_DIR))
        os.close(source)
    if owner is not None:
        _chown_tree(scratch, *owner)
    hidden = []
    for path in config.hide_paths:
        try:
            namespaces.hide(path)
            hidden.append(path)
        except OSError:
            continue
    protections.on("hidden_folders", f"{len(hidden)} covered")
    if owner is not None:
        blocked: dict[str, list[str]] = {}
        for path in config.read_paths:
            if os.path.exists(path):
                ancestor = namespaces.blocked_ancestor(path)
                if ancestor is not None:
                    blocked.setdefault(ancestor, []).append(os.path.realpath(path))
        for ancestor, paths in blocked.items():
            namespaces.cover(ancestor, sorted(set(paths)), os.path.join(scratch, STAGE_DIR))
        if blocked:
            os.rmdir(os.path.join(scratch, STAGE_DIR))


def _blocked_for_others(paths: list[str]) -> bool:
    return any(os.path.exists(p) and namespaces.blocked_ancestor(p) is not None for p in paths)


# Folders a sandbox may mount its scratch tmpfs on, in order of preference: it hides what lies below, so the
# first that holds none of the folders the sandbox reads (a checkout or a virtual environment under /tmp).
SCRATCH_MOUNT_CANDIDATES = ("/tmp", "/var/tmp", "/mnt", "/srv", "/media")


def scratch_mountpoint(read_paths: list[str]) -> str:
    """Where the scratch tmpfs goes: the first candidate that exists and hides none of `read_paths`."""
    for candidate in SCRATCH_MOUNT_CANDIDATES:
        if os.path.isdir(candidate) and not any(os.path.exists(p) and _below(p, candidate) for p in read_paths):
            return candidate
    raise OSError(f"every scratch mount point {SCRATCH_MOUNT_CANDIDATES} holds a folder the sandbox must read")


def _below(path: str, folder: str) -> bool:
    real, base = os.path.realpath(path), os.path.realpath(folder)
    return real == base or real.startswith(base + os.sep)


def _drop_to_nobody(protections: Protections) -> tuple[int, int] | None:
    try:
        uid, gid = _nobody()
    except KeyError:
        protections.off("unprivileged_user", "no user named nobody")
        return None
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    namespaces.prctl(PR_SET_DUMPABLE, 1)  # changing user clears it, and /proc/self/uid_map needs it
    protections.on("unprivileged_user", f"uid {uid}")
    return uid, gid


def _apply_limits(config: LaunchConfig) -> str:
    """Sets the program's rlimits, each soft and hard, and says what it set: the names set, then after a
    newline what could not be set and why (the program's side of the `rlimits` protection)."""
    limits = {
        MEMORY_RLIMITS[config.memory_kind]: config.memory_bytes,
        "RLIMIT_CPU": config.cpu_seconds,
        "RLIMIT_NPROC": config.max_processes,
        "RLIMIT_FSIZE": config.max_file_bytes,
        "RLIMIT_NOFILE": config.max_open_files,
        "RLIMIT_CORE": 0,
    }
    applied, missed = [], []
    for name, value in limits.items():
        short = name.removeprefix("RLIMIT_").lower()
        number = getattr(resource, name, None)
        if number is None:
            missed.append(f"{short} (not on this system)")
            continue
        try:
            resource.setrlimit(number, (value, value))
            applied.append(short)
        except (OSError, ValueError, OverflowError) as exc:
            missed.append(f"{short} ({exc})")
    return ", ".join(applied) + "\n" + "; ".join(missed)


def _report_limits(fd: int, protections: Protections) -> None:
    """Reads what the program said of its rlimits (until it closes `fd`, at the latest when it execs) into the
    protection `rlimits`."""
    with os.fdopen(fd, "rb") as said:
        text = said.read()
    applied, _, missed = text.decode("utf-8", "replace").partition("\n")
    if not applied:
        protections.off("rlimits", f"none set{': ' + missed if missed else ' (the program ended before it said)'}")
    elif missed:
        protections.on("rlimits", f"{applied}; not set: {missed}")
    else:
        protections.on("rlimits", applied)


AUTOGROUP_SWITCH = "/proc/sys/kernel/sched_autogroup_enabled"
AUTOGROUP_OF_SELF = "/proc/self/autogroup"
PER_THREAD_SHARE = "each of the program's threads competes for CPU with other grading jobs' on its own"


def _cpu_share(protections: Protections, where: cpu_group.Placement) -> None:
    """Whether the program's threads share one scheduling group's CPU time: the program starts its own session
    (_sandbox_program), and with the kernel's autogroup scheduling each session is one group, so a submission
    that runs many busy threads competes with other grading jobs as one process, not thread by thread. The
    kernel groups by session only in the root CPU cgroup (`where`, read before any namespace is entered)."""
    enabled = _proc_text(AUTOGROUP_SWITCH)
    if enabled is None:
        protections.off("cpu_share", f"the kernel has no autogroup scheduling ({AUTOGROUP_SWITCH} unreadable): "
                                     f"{PER_THREAD_SHARE}")  # fmt: skip
    elif enabled == "0":
        protections.off("cpu_share", f"autogroup scheduling is switched off (kernel.sched_autogroup_enabled = 0): "
                                     f"{PER_THREAD_SHARE}")  # fmt: skip
    elif where.root is False:
        protections.off("cpu_share", f"the grader runs in {where.detail}, and the kernel groups by session only in "
                                     f"the root CPU cgroup: {PER_THREAD_SHARE}")  # fmt: skip
    elif where.root is None:
        protections.off("cpu_share", f"whether the grader runs in the root CPU cgroup, where alone the kernel groups "
                                     f"by session, cannot be told ({where.detail}): {PER_THREAD_SHARE}")  # fmt: skip
    elif not (_proc_text(AUTOGROUP_OF_SELF) or "").startswith("/autogroup-"):
        protections.off("cpu_share", f"the launcher's own session got no autogroup ({AUTOGROUP_OF_SELF} names "
                                     f"none): {PER_THREAD_SHARE}")  # fmt: skip
    else:
        protections.on("cpu_share", "its own session, one autogroup: its threads together get one share of CPU")


def _proc_text(path: str) -> str | None:
    """A /proc file's text, stripped; None where it cannot be read. /proc/self/autogroup names the session's
    autogroup ("/autogroup-N") and is empty for a process whose session began before autogroups were made."""
    text = cpu_group.read_text(path)
    return None if text is None else text.strip()


def _sandbox_program(config: LaunchConfig, scratch: str, read_paths: list[str], limits_fd: int) -> None:
    """In the program's process, after fork: limits (said to init on `limits_fd`), Landlock, then exec. Never
    returns."""
    try:
        os.setsid()
        if namespaces.is_linux():  # dies with init even where no PID namespace ends them together
            namespaces.prctl(namespaces.PR_SET_PDEATHSIG, int(signal.SIGKILL))
        os.write(limits_fd, _apply_limits(config).encode())
        os.close(limits_fd)
        if landlock.abi_version() and "landlock" not in config.leave_off:
            landlock.restrict(read_paths, [scratch], [*DEVICE_FILES, *config.device_paths],  # failing is fatal
                              thread_names=bool(config.device_paths))
        else:
            namespaces.prctl(landlock.PR_SET_NO_NEW_PRIVS, 1)  # no Landlock: at least no new privileges
        os.chdir(os.path.join(scratch, config.workdir))
        start = 3
        for fd in sorted(set(config.pass_fds)):
            os.closerange(start, fd)
            start = fd + 1
        os.closerange(start, 1 << 16)
        argv = [arg.replace(SCRATCH_PLACEHOLDER, scratch) for arg in config.argv]
        env = {k: v.replace(SCRATCH_PLACEHOLDER, scratch) for k, v in config.env.items()}
        os.execve(argv[0], argv, env)
    except BaseException as exc:  # nothing may return into the launcher's code from here
        try:
            os.write(2, f"pagecheck sandbox: could not start {config.argv[:1]}: {exc}\n".encode())
        finally:
            os._exit(SETUP_FAILED)


def _exit_code(status: int) -> int:
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def _stream_back(folder: str, fd: int) -> None:
    """The folder as an uncompressed tar stream of regular files and folders, written to `fd`. Runs once every
    process of the program has ended (_end_the_program), and opens each file without following a link, reading
    what it opened (a name swapped for a link between a check and the open cannot hand over another file)."""
    with os.fdopen(fd, "wb") as stream, tarfile.open(fileobj=stream, mode="w|") as archive:
        if os.path.islink(folder):  # os.walk would follow it: the program may have put a link in the folder's place
            return
        for root, dirs, files in os.walk(folder):
            dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(root, d)))
            for name in sorted(files):
                path = os.path.join(root, name)
                try:
                    opened = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
                except OSError:  # a link, or gone
                    continue
                with os.fdopen(opened, "rb") as file:
                    if not stat.S_ISREG(os.fstat(opened).st_mode):
                        continue
                    entry = archive.gettarinfo(arcname=os.path.relpath(path, folder), fileobj=file)
                    archive.addfile(entry, file)


def _end_the_program() -> None:
    """End every process the program left (daemons included) and reap them, before init reads its files."""
    if os.getpid() == 1:  # PID 1 of a PID namespace: every other process in it is the program's
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        while True:
            try:
                os.wait()
            except ChildProcessError:
                return
    _kill_descendants()


def _init(config: LaunchConfig, scratch: str, protections: Protections, as_root: bool, has_mounts: bool,
          read_paths: list[str]) -> None:  # fmt: skip
    """PID 1 of the sandbox (or, without namespaces, a subreaper). Never returns."""
    code = SETUP_FAILED
    try:
        if has_mounts:
            try:
                namespaces.mount_proc()
                protections.on("private_proc")
            except OSError as exc:
                protections.off("private_proc", f"mounting /proc refused ({exc.strerror or exc})")
        if as_root and "unprivileged_user" in config.leave_off:
            protections.off("unprivileged_user", "left off by the settings: the program runs as root")
        elif as_root and not has_mounts and _blocked_for_others(read_paths):
            protections.off("unprivileged_user", "Python lies in a folder closed to other users, and without a "
                                                 "mount namespace it cannot be opened to them: the program runs as root")  # fmt: skip
        elif as_root and not has_mounts:
            _drop_to_nobody(protections)
        elif as_root:
            _drop_to_nobody(protections)
            try:
                uid, gid = os.getuid(), os.getgid()
                namespaces.unshare(namespaces.CLONE_NEWUSER)
                namespaces.write_id_maps(uid, uid, gid, gid)
                protections.on("user_namespace", "its own count of processes")
            except OSError as exc:
                protections.off("user_namespace", f"unshare refused ({exc.strerror or exc}); the process limit "
                                                  "counts every process of that user")  # fmt: skip
        elif "unprivileged_user" not in protections.state:
            protections.off("unprivileged_user", "the grader does not run as root, so there is nobody to drop to")
        if namespaces.is_linux():
            namespaces.prctl(namespaces.PR_SET_PDEATHSIG, int(signal.SIGKILL))
            namespaces.prctl(namespaces.PR_SET_CHILD_SUBREAPER, 1)
        landlock_abi = landlock.abi_version()
        if "landlock" in config.leave_off:
            protections.off("landlock", "left off by the settings")
        elif landlock_abi:
            protections.on("landlock", f"ABI {landlock_abi}: filesystem, TCP{', signals' if landlock_abi >= 6 else ''}"
                                       f"{'; its own thread names writable, for the GPU driver' if config.device_paths else ''}")
        else:
            protections.off("landlock", "the kernel offers none: files outside the scratch folder are readable "
                                        "as far as the user's permissions go")  # fmt: skip
        _write_status(config.status_fd, {"protections": protections.state})
        limits_r, limits_w = os.pipe()
        program = os.fork()
        if program == 0:
            os.close(limits_r)
            _sandbox_program(config, scratch, read_paths, limits_w)
        os.close(limits_w)
        _report_limits(limits_r, protections)
        _write_status(config.status_fd, {"protections": protections.state})
        for fd in config.pass_fds:
            os.close(fd)
        while True:
            pid, status, usage = os.wait4(-1, 0)
            if pid == program:
                code = _exit_code(status)
                break
        report: dict[str, Any] = {"exit": code, "maxrss_kb": usage.ru_maxrss,
                                  "cpu_s": round(usage.ru_utime + usage.ru_stime, 3)}  # fmt: skip
        if config.output_fd >= 0:
            _end_the_program()  # nothing may move files under init while it reads them
            try:
                _stream_back(os.path.join(scratch, SUBMISSION_DIR), config.output_fd)
            except OSError as exc:
                report["copy_back"] = str(exc)
        _write_status(config.status_fd, report)
        if not has_mounts:
            _kill_descendants()
    except BaseException as exc:
        os.write(2, f"pagecheck sandbox: init failed: {exc!r}\n".encode())
    os._exit(code)


def _kill_descendants() -> None:
    """Without a PID namespace: end every process left that names this one (a subreaper) as parent."""
    me = str(os.getpid())
    for _ in range(100):
        children = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as file:
                    fields = file.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[1] == me:
                children.append(int(entry))
        if not children:
            return
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for pid in children:  # each reaped before the next scan, so that its own orphans are this one's by then
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def launch(config: LaunchConfig) -> int:
    protections = Protections()
    _cpu_share(protections, cpu_group.placement())
    as_root = os.geteuid() == 0
    has_mounts = _enter_namespaces(config, protections, as_root)
    owner = None
    if as_root and "unprivileged_user" not in config.leave_off and (has_mounts or not _blocked_for_others(config.read_paths)):
        try:
            owner = _nobody()
        except KeyError:
            owner = None
    if has_mounts:
        scratch = config.scratch_mountpoint
        try:
            _prepare_mounts(config, scratch, protections, owner)
        except OSError as exc:
            sys.stderr.write(f"pagecheck sandbox: mounts failed: {exc}\n")
            return SETUP_FAILED
    else:
        scratch = config.fallback_scratch
        protections.off("disk_quota", "no mount namespace for a size-limited tmpfs; only the file size limit holds")
        protections.off("hidden_folders", "no mount namespace")
        protections.off("private_proc", "no mount namespace")
        if config.copy_in:
            _copy_tree(config.copy_in, os.path.join(scratch, SUBMISSION_DIR))
        if owner is not None:
            _chown_tree(scratch, *owner)
    read_paths = [p for p in config.read_paths if os.path.exists(p)]
    init = os.fork()
    if init == 0:
        _init(config, scratch, protections, as_root, has_mounts, read_paths)
    for fd in (*config.pass_fds, config.status_fd, config.output_fd):
        if fd >= 0:
            os.close(fd)
    _, status = os.waitpid(init, 0)
    return _exit_code(status)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit():
        sys.stderr.write("usage: python -m pagecheck.grading.launcher CONFIG_FD\n")
        return SETUP_FAILED
    with os.fdopen(int(argv[0]), "r") as file:
        config = LaunchConfig.from_json(file.read())
    if namespaces.is_linux():
        namespaces.prctl(namespaces.PR_SET_PDEATHSIG, int(signal.SIGKILL))
    return launch(config)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
