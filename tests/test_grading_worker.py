"""The sandboxed worker, through the proxy subject: what student code inside it can and cannot do.

Each test loads a small subject file with `sandbox:` and calls into it. The
probes run inside the worker; their answers come back as values.
"""

from __future__ import annotations

import enum
import json
import os
import subprocess
import sys
import textwrap
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import mlx.core as mx
import numpy as np
import pytest

from pagecheck.grading import landlock
from pagecheck.grading.launcher import SCRATCH_MOUNT_CANDIDATES
from pagecheck.grading.remote_subject import (
    FORGED_EVENT,
    MAX_EVENTS,
    Session,
    StaleHandleError,
    active_session,
    close_sessions,
    configure,
)
from pagecheck.grading.sandbox import loads_cuda, memory_kind_for
from pagecheck.grading.suite_pass import code_roots, import_roots
from pagecheck.grading.worker_process import WorkerIncident, WorkerLimits, WorkerSettings
from pagecheck.invariants.subject import Subject, SubjectError, load_subject
from pagecheck.reference import attention as reference_attention

ROOT = Path(__file__).resolve().parent.parent
# A file of the harness as installed (a checkout's reference/ folder, or an install's pagecheck/reference/).
HARNESS_MODULE_FILE = Path(reference_attention.__file__).resolve()
LINUX = os.uname().sysname == "Linux"
AS_ROOT = os.geteuid() == 0

PROBES = '''
import ctypes, enum, gc, importlib, json, os, signal, socket, struct, subprocess, sys, time, typing
from concurrent.futures import ThreadPoolExecutor
import mlx.core as mx
import numpy as np

def _try(action):
    try:
        return ["ok", action()]
    except BaseException as exc:
        return ["refused", type(exc).__name__]

def read_harness():
    return _try(lambda: open(HARNESS_FILE).read(10))

def import_harness():
    return _try(lambda: importlib.import_module("ref" + "erence.subject").__name__)

def import_statement():
    def go():
        import pagecheck.invariants.subject
        return "imported"
    return _try(go)

def connect():
    return _try(lambda: socket.create_connection(("127.0.0.1", 22), timeout=2).close())

def write_outside():
    # A world-writable folder that is not the scratch: only Landlock stands between the worker and it.
    folder = "/var/tmp" if os.getcwd() != "/var/tmp" else "/tmp"
    return _try(lambda: open(folder + "/pagecheck-probe", "w").write("x"))

def kill_parent():
    return [os.getppid(), _try(lambda: os.kill(os.getppid(), signal.SIGTERM)), _try(lambda: os.kill(1, signal.SIGKILL)),
            _try(lambda: os.kill(-1, signal.SIGKILL))]

def processes():
    return sorted(int(p) for p in os.listdir("/proc") if p.isdigit())

def whoami():
    return [os.getuid(), os.getcwd()]

def autogroup():
    return _try(lambda: open("/proc/self/autogroup").read().split()[0])

def fill_disk():
    chunk = b"x" * (1 << 20)
    written = 0
    try:
        with open("big", "wb") as f:
            for _ in range(4096):
                f.write(chunk)
                f.flush()
                written += 1
    except OSError as exc:
        return ["stopped", written, type(exc).__name__]
    return ["not stopped", written]

def daemons(marker):
    return [_try(lambda: subprocess.Popen(["sleep", marker], start_new_session=True).pid),
            _try(lambda: os.posix_spawn("/bin/sleep", ["sleep", marker], {})), _try(os.fork),
            _try(lambda: ctypes.CDLL(None).fork()),  # native code: -1 when refused, 0 in a child, else its pid
            _try(lambda: list(ThreadPoolExecutor(2).map(len, ["ab", "c"])))]

def introspect():
    return _try(lambda: len(gc.get_referrers(mx.fast.rms_norm)))

def forge_events(count, kind):
    # The worker's pipe is in reach of student code and the frame format in the grader's source: forged event
    # frames, then a real trap.
    text = json.dumps({"event": {"kind": kind, "detail": "forged", "step": "(import)"}}).encode()
    for _ in range(count):
        os.write(int(sys.argv[2]), struct.pack("<4sII", b"PCW1", len(text), 0) + text)
    return _try(lambda: getattr(mx.fast, "scaled_" + "dot_product_attention")(
        mx.ones((1, 1, 1, 4)), mx.ones((1, 1, 2, 4)), mx.ones((1, 1, 2, 4)), scale=1.0))

def forge_frame(header):
    text = json.dumps(header).encode()
    os.write(int(sys.argv[2]), struct.pack("<4sII", b"PCW1", len(text), 0) + text)
    return "written"

def sdpa_original():
    fused = getattr(mx.fast, "scaled_" + "dot_product_attention")
    return [_try(lambda: fused.original), _try(lambda: fused(mx.ones((1, 1, 1, 4)), mx.ones((1, 1, 2, 4)),
                                                        mx.ones((1, 1, 2, 4)), scale=1.0))]

def worker_modules():
    # What a submission can still reach of the worker's own modules: by name, and through a trap's wrapper.
    by_name = sorted(name for name in sys.modules if name.startswith("_sandbox_"))
    return [by_name, _try(lambda: sorted(mx.take.__globals__)[:3])]

def mutate(a, b, c):
    a[0] = 5.0
    b += 1
    np.asarray(c)[0] = 7
    return "changed"

class Holder:
    def __init__(self):
        self.table = mx.array([-1, 2])

    @property
    def fresh(self):
        return mx.array([-1, 2])

def holder():
    return Holder()

class Subclassed(np.ndarray):
    pass

class SubclassHolder:
    def __init__(self):
        self.pages = np.array([1.0, 2.0]).view(Subclassed)

def subclassed():
    return SubclassHolder()

def kind(value):
    return type(value).__name__

class Mask(typing.NamedTuple):
    rows: int
    table: object
    name: str = "causal"

class RecordHolder:
    def __init__(self):
        self.mask = Mask(2, mx.array([1, 2]))
        self.nan = Mask(1, float("nan"))

    @property
    def fresh(self):
        return Mask(2, mx.array([1, 2]))

def is_held(holder, value, field="mask"):
    return value is getattr(holder, field)

def record_holder():
    return RecordHolder()

class MaskKind(str, enum.Enum):
    CAUSAL = "causal"

def str_enum_mask():
    return MaskKind.CAUSAL

def is_str_enum_mask(value):
    return value is MaskKind.CAUSAL

class PageKind(enum.IntEnum):
    CAUSAL = 1

def int_enum_mask():
    return PageKind.CAUSAL

def int_enum_pair():
    return [PageKind.CAUSAL, PageKind.CAUSAL]

def is_int_enum_mask(value):
    return value is PageKind.CAUSAL

def segfault():
    return ctypes.string_at(0)

def hang():
    while True:
        time.sleep(1)

def hoard():
    kept = []
    while True:
        kept.append(np.ones(1 << 26))

def shout():
    for _ in range(200):
        sys.stdout.write("x" * (1 << 18) + "\\n")
    return "done"

def raise_custom():
    class PoolError(ValueError):
        pass
    raise PoolError("Page 3 is already free")

class TinyKvPagedPool:
    def __init__(self, page_size):
        self.page_size = page_size
        self.pages = []

class TinyKvPagedCache:
    def __init__(self, pool):
        self.pool = pool

def strings_in_frames():
    # Every string a submission can reach by walking up its own call stack: locals, and the items and
    # attributes of what they hold, one level down.
    found, frame = set(), sys._getframe(1)
    def collect(value):
        if isinstance(value, str):
            found.add(value)
        elif isinstance(value, dict):
            for k, v in value.items():
                collect(k) if isinstance(k, str) else None
                collect(v) if isinstance(v, str) else None
    while frame is not None:
        for value in list(frame.f_locals.values()):
            collect(value)
            if isinstance(value, dict):
                for inner in list(value.values()):
                    collect(inner)
            collect(getattr(value, "__dict__", None))
        frame = frame.f_back
    return sorted(found)

def paged_attention(probe, *args):
    return globals()[probe](*args)
'''


@contextmanager
def sandboxed(folder: Path, name: str, source: str) -> Iterator[tuple[Subject, Session]]:
    """`source` written to folder/name and loaded with `sandbox:` in a worker of its own; the session ends after."""
    path = folder / name
    path.write_text(source)
    configure(WorkerSettings(spec=f"{{scratch}}/submission/{name}", copy_in=str(folder), call_timeout_s=20,
                             limits=WorkerLimits(memory_bytes=2 << 30, disk_bytes=64 << 20, max_processes=32)))  # fmt: skip
    try:
        subject = load_subject(f"sandbox:{path}")
    finally:
        configure(None)
    session = active_session()
    assert session is not None
    try:
        yield subject, session
    finally:
        close_sessions()


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[tuple[Subject, Session]]:
    harness_file = HARNESS_MODULE_FILE
    with sandboxed(tmp_path, "probes.py", f"HARNESS_FILE = {str(harness_file)!r}\n" + textwrap.dedent(PROBES)) as pair:
        yield pair


def probe(subject: Subject, name: str, *args: object) -> object:
    return subject.get("paged_attention")(name, *args)


def test_harness_is_out_of_reach(sandbox: tuple[Subject, Session]) -> None:
    subject, session = sandbox
    assert probe(subject, "read_harness") == ["refused", "PermissionError"]
    assert probe(subject, "import_harness")[0] == "refused"
    assert probe(subject, "import_statement") == ["refused", "ImportError"]
    reported = {e["kind"] for e in session.events}
    assert {"harness_import", "harness_read"} <= reported


def test_gc_introspection_is_refused(sandbox: tuple[Subject, Session]) -> None:
    subject, session = sandbox
    assert probe(subject, "introspect") == ["refused", "RuntimeError"]
    assert any(e["kind"] == "introspection" for e in session.events)


def test_sdpa_is_trapped_by_every_route(sandbox: tuple[Subject, Session]) -> None:
    subject, session = sandbox
    original, call = probe(subject, "sdpa_original")
    assert original == ["refused", "AttributeError"]  # the real function is not kept anywhere
    assert call == ["refused", "ForbiddenCallError"]
    assert [e["kind"] for e in session.events if e["kind"] == "sdpa_trap"] == ["sdpa_trap"]


def test_forged_event_frames_are_flagged_and_hide_no_trap(sandbox: tuple[Subject, Session]) -> None:
    # More forged reports than the session keeps of one kind, then an SDPA call: the trap's report still lands.
    subject, session = sandbox
    assert probe(subject, "forge_events", MAX_EVENTS + 5, "note") == ["refused", "ForbiddenCallError"]
    kinds = [e["kind"] for e in session.events]
    assert kinds.count(FORGED_EVENT) == MAX_EVENTS and kinds.count("sdpa_trap") == 1
    assert "note" not in kinds
    # A forged "incident" (only the trusted side records incidents) is a forged frame too.
    probe(subject, "forge_events", 1, "incident")
    assert [e for e in session.events if e["kind"] == "incident"] == []


def test_an_event_the_worker_did_not_write_is_a_forged_frame(sandbox: tuple[Subject, Session]) -> None:
    # A frame whose event is not a JSON object was dropped without a word (red team: a frame of the
    # submission's that declares a buffer swallows the worker's next frames that way); one of a kind the worker
    # reports, written by the submission, was filed as the worker's, with the submission's text.
    subject, session = sandbox
    assert probe(subject, "forge_frame", {"event": 5}) == "written"
    assert probe(subject, "forge_frame", {"event": {"kind": "introspection", "detail": "# Regraded",
                                                    "where": "x.py:1"}}) == "written"  # fmt: skip
    forged = [e for e in session.events if e["kind"] == FORGED_EVENT]
    assert [e["detail"] for e in forged] == [
        "the worker's pipe carried an event of kind int that the worker did not write",
        "the worker's pipe carried an event of kind introspection that the worker did not write",
    ]
    assert [e for e in session.events if e["kind"] == "introspection"] == []


def test_frames_the_worker_wrote_arrive_all_and_in_turn(tmp_path: Path) -> None:
    """The worker numbers its frames; the trusted side takes an event as the worker's only in turn, as a JSON
    object, without buffers. A number past the next (frames that never arrived) or a reply the worker did not
    write stops the worker: the call fails."""
    from pagecheck.grading import wire
    from pagecheck.grading.worker_process import WorkerProcess

    def frames(*headers: tuple[dict[str, object], list[bytes]]) -> tuple[WorkerProcess, list[tuple[object, bool]]]:
        seen: list[tuple[object, bool]] = []
        worker = WorkerProcess(WorkerSettings(spec="unused.py"), lambda event, genuine: seen.append((event, genuine)))
        read_fd, write_fd = os.pipe()
        for header, buffers in headers:
            wire.write_frame(write_fd, header, buffers)
        os.close(write_fd)
        worker._reader = wire.FrameReader(read_fd)
        return worker, seen

    trap = {"kind": "sdpa_trap", "detail": "d", "where": "a.py:3"}
    worker, seen = frames(({"event": trap, "seq": 0}, []), ({"event": trap}, []), ({"event": [trap], "seq": 1}, []),
                          ({"event": trap, "seq": 2}, [b"swallowed"]), ({"event": trap, "seq": 1}, []),
                          ({"ok": 7, "seq": 3}, []))  # fmt: skip
    assert worker._read_reply(time.monotonic() + 5, "a call")[0] == {"ok": 7, "seq": 3}
    assert seen == [(trap, True), (trap, False), ({"kind": "list"}, False), (trap, False), (trap, False)]
    worker, _ = frames(({"ok": 1, "seq": 0}, []), ({"ok": 2, "seq": 2}, []))
    assert worker._read_reply(time.monotonic() + 5, "a call")[0]["ok"] == 1
    with pytest.raises(WorkerIncident, match="frame 1 of the worker's never arrived") as gap:
        worker._read_reply(time.monotonic() + 5, "a call")
    assert gap.value.kind == "protocol"
    worker, _ = frames(({"ok": 1}, []),)
    with pytest.raises(WorkerIncident, match="a reply the worker did not write"):
        worker._read_reply(time.monotonic() + 5, "a call")


def test_errors_keep_their_builtin_type_and_message(sandbox: tuple[Subject, Session]) -> None:
    subject, _ = sandbox
    with pytest.raises(ValueError, match="PoolError: Page 3 is already free"):
        probe(subject, "raise_custom")


def test_the_worker_modules_are_not_in_sys_modules(sandbox: tuple[Subject, Session]) -> None:
    # sys.modules once held them, one line from rebinding the wire or the watch's classes. A trap's wrapper
    # still reaches its module through its globals (Python audits no read of __globals__): the watch's named
    # limit, which this test records so that a change to it is seen.
    subject, session = sandbox
    by_name, globals_read = probe(subject, "worker_modules")
    assert by_name == [] and globals_read[0] == "ok"


def test_identity_and_handles(sandbox: tuple[Subject, Session]) -> None:
    subject, _ = sandbox
    pool = subject.get("TinyKvPagedPool")(4)
    cache = subject.get("TinyKvPagedCache")(pool)
    assert cache.pool is pool and pool.page_size == 4
    pool.page_size = 8
    assert cache.pool.page_size == 8


def test_in_place_changes_reach_the_caller(sandbox: tuple[Subject, Session]) -> None:
    subject, _ = sandbox
    a, b, c = mx.zeros(3), mx.zeros(3, dtype=mx.int32), mx.zeros(2)
    untouched = mx.ones(3)
    before = id(a)
    assert probe(subject, "mutate", a, b, c) == "changed"
    assert id(a) == before and a.tolist() == [5.0, 0.0, 0.0]
    assert b.tolist() == [1, 1, 1] and c.tolist() == [7.0, 0.0]
    assert untouched.tolist() == [1.0, 1.0, 1.0]


def test_an_array_of_a_subclass_goes_back_as_a_copy(sandbox: tuple[Subject, Session]) -> None:
    # A subclass's methods are the submission's code: handed back as itself into a call, they answered the gather
    # watch's questions there (a red-team submission's pages reported a 3-d shape to the watch alone, unjudged).
    subject, _ = sandbox
    assert probe(subject, "kind", probe(subject, "subclassed").pages) == "ndarray"


def test_an_array_read_from_the_worker_goes_back_as_itself(sandbox: tuple[Subject, Session]) -> None:
    """As in process, where the caller passes the very array it read: a call that changes it in place changes it
    where the subject's later reads see it; one read fresh each time, or changed here since, goes as a copy."""
    subject, _ = sandbox
    holder = probe(subject, "holder")
    table, fresh = holder.table, holder.fresh
    probe(subject, "mutate", table, mx.zeros(3, dtype=mx.int32), mx.zeros(2))
    assert table.tolist() == [5, 2] and holder.table.tolist() == [5, 2]
    probe(subject, "mutate", fresh, mx.zeros(3, dtype=mx.int32), mx.zeros(2))
    assert fresh.tolist() == [5, 2] and holder.fresh.tolist() == [-1, 2]
    changed = holder.table
    changed[1] = 9
    probe(subject, "mutate", changed, mx.zeros(3, dtype=mx.int32), mx.zeros(2))
    assert changed.tolist() == [5, 9] and holder.table.tolist() == [5, 2]


def test_a_named_tuple_read_from_the_worker_goes_back_as_itself(sandbox: tuple[Subject, Session]) -> None:
    """A cache's mask record (a typing.NamedTuple) handed back to its attention came as a record of another type:
    an attention that knows its mask by isinstance, which the course accepts, failed 10 course clauses in the
    sandbox. Now as arrays: the very record while its items are unchanged, else a copy."""
    subject, _ = sandbox
    holder = probe(subject, "record_holder")
    mask = holder.mask
    assert mask.rows == 2 and mask.name == "causal" and mask.table.tolist() == [1, 2]
    assert probe(subject, "is_held", holder, mask) is True
    assert probe(subject, "is_held", holder, holder.nan, "nan") is True  # NaN stands for itself
    assert probe(subject, "is_held", holder, holder.fresh) is False  # an equal record, not the held one
    assert probe(subject, "is_held", holder, mask._replace(rows=3)) is False  # built here: a record of its fields
    assert probe(subject, "kind", mask._replace(rows=3)) == "RemoteRecord"
    changed = holder.mask
    changed.table[0] = 7  # its array changed here: the record goes as a copy, the change with it
    assert probe(subject, "is_held", holder, changed) is False


def test_a_str_subclass_read_from_the_worker_goes_back_as_itself(sandbox: tuple[Subject, Session]) -> None:
    """A cache's mask as a str enum's member crossed as a plain str, and came back to its attention as one: an
    attention that knows its mask by identity or type, which the course accepts, failed 10 course clauses in the
    sandbox. A str subclass now crosses as a handle: itself when it comes back; a plain str is still a str."""
    subject, _ = sandbox
    mask = probe(subject, "str_enum_mask")
    assert not isinstance(mask, str)
    assert probe(subject, "is_str_enum_mask", mask) is True
    assert probe(subject, "is_str_enum_mask", "causal") is False
    assert probe(subject, "kind", "causal") == "str"
    # A str subclass of the suite's own (NumPy's) was never the worker's: it goes as its text.
    assert probe(subject, "kind", np.str_("causal")) == "str"


def test_an_int_subclass_read_from_the_worker_goes_back_as_itself(sandbox: tuple[Subject, Session]) -> None:
    """A cache's mask as an IntEnum's member crossed as a plain int, and came back to its attention as one: an
    attention that knows its mask by identity or type, which the course accepts, failed 10 course clauses in the
    sandbox. An int subclass now crosses as an int that remembers its origin, as a named tuple does: itself when it
    comes back; an equal int made here is still a plain int."""
    subject, _ = sandbox
    mask = probe(subject, "int_enum_mask")
    assert mask == 1 and isinstance(mask, int) and mask + 1 == 2  # an int to the suite
    assert probe(subject, "is_int_enum_mask", mask) is True
    assert probe(subject, "is_int_enum_mask", 1) is False
    assert probe(subject, "is_int_enum_mask", mask + 0) is False  # arithmetic here makes a plain int
    assert probe(subject, "kind", 1) == "int"
    first, second = probe(subject, "int_enum_pair")
    assert probe(subject, "is_int_enum_mask", second) is True and probe(subject, "is_int_enum_mask", first) is True
    # An int subclass of the suite's own (bool aside) was never the worker's: it goes as its value.
    assert probe(subject, "kind", enum.IntEnum("Local", "ONE")(1)) == "int"


@pytest.mark.skipif(not LINUX, reason="Linux namespaces")
def test_namespaces_and_limits(sandbox: tuple[Subject, Session]) -> None:
    subject, session = sandbox
    on = {name for name, state in session.protections.items() if state.startswith("on")}
    assert {"pid_namespace", "network_namespace", "mount_namespace", "disk_quota", "private_proc"} <= on
    # Set in the program's process after init's first report: init reads what the program set before it execs.
    memory = "data" if memory_kind_for("cpu") == "data" else "as"  # the data segment where MLX runs on CUDA
    assert session.protections["rlimits"] == f"on ({memory}, cpu, nproc, fsize, nofile, core)"
    assert probe(subject, "connect")[0] == "refused"
    assert probe(subject, "write_outside")[0] == "refused"
    assert len(probe(subject, "processes")) <= 3  # init and the worker (and a reaped child at most)
    uid, cwd = probe(subject, "whoami")
    assert cwd in SCRATCH_MOUNT_CANDIDATES  # the scratch tmpfs, where the worker starts
    if AS_ROOT:
        assert uid == 65534
    if landlock.abi_version():
        assert "landlock" in on
    status, megabytes, error = probe(subject, "fill_disk")
    assert status == "stopped" and megabytes < 64 and error == "OSError"


@pytest.mark.skipif(not LINUX, reason="Linux scheduling")
def test_cpu_share_follows_the_kernels_autogroup(sandbox: tuple[Subject, Session]) -> None:
    """The worker runs in a session, and so an autogroup, of its own; the protection is on exactly where the
    kernel schedules by autogroup: the switch is on and the grader runs in the root CPU cgroup."""
    from pagecheck.grading import cpu_group

    subject, session = sandbox
    state = session.protections["cpu_share"]
    try:
        enabled = Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() != "0"
    except OSError:
        assert state.startswith("off: the kernel has no autogroup scheduling")
        return
    where = cpu_group.placement()
    if not enabled:
        assert state.startswith("off: autogroup scheduling is switched off")
    elif where.root is False:
        assert state.startswith("off: the grader runs in the CPU cgroup")
    elif where.root is None:
        assert state.startswith("off: whether the grader runs in the root CPU cgroup")
    else:
        assert state.startswith("on (its own session, one autogroup")
        # What "on" claims: the worker's session has an autogroup of its own, not the grader's.
        outcome, theirs = probe(subject, "autogroup")
        ours = Path("/proc/self/autogroup").read_text().strip()  # empty where our session predates autogroups
        assert outcome == "ok" and theirs.startswith("/autogroup-") and not ours.startswith(theirs + " ")


def _cgroup_machine(root, version: int, membership: str, folders: dict[str, list[str]], mount_root: str = "/"):
    """A /proc/self stand-in (cgroup, mountinfo) and cgroup folders under `root`: `folders` maps a folder,
    relative to the mount, to the files it holds."""
    proc = root / "proc"
    proc.mkdir()
    mount = root / "sys fs cgroup"  # a space, escaped in mountinfo as the kernel does
    escaped = str(mount).replace(" ", "\\040")
    if version == 1:
        (proc / "cgroup").write_text(f"9:name=systemd:/\n4:memory:/x\n2:cpu,cpuacct:{membership}\n0::/\n")
        line = f"32 31 0:29 {mount_root} {escaped} rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
    else:
        (proc / "cgroup").write_text(f"0::{membership}\n")
        line = f"41 31 0:38 {mount_root} {escaped} rw,relatime - cgroup2 cgroup2 rw\n"
    (proc / "mountinfo").write_text("31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n" + line)
    for folder, files in folders.items():
        (mount / folder).mkdir(parents=True, exist_ok=True)
        for name in files:
            (mount / folder / name).write_text("")
    return str(proc)


@pytest.mark.parametrize(
    "version, membership, folders, mount_root, root",
    [
        (1, "/", {".": ["cgroup.sane_behavior", "cpu.shares"]}, "/", True),
        (1, "/docker/abc", {".": ["cgroup.sane_behavior"], "docker/abc": ["cpu.shares"]}, "/", False),
        (1, "/", {".": ["cpu.shares"]}, "/", False),  # a cgroup namespace's "/", below the real root
        (1, "/docker/abc", {".": ["cgroup.sane_behavior"]}, "/", None),  # its folder is not mounted here
        (1, "/a/b", {".": ["cpu.shares"]}, "/a/b", False),  # the mount is of a cgroup below the root
        (2, "/", {".": ["cgroup.procs"]}, "/", True),
        (2, "/user.slice/s", {".": [], "user.slice": ["memory.max"], "user.slice/s": []}, "/", True),
        (2, "/system.slice/x", {".": [], "system.slice": ["cpu.weight"], "system.slice/x": []}, "/", False),
        (2, "/a", {".": ["cgroup.type"], "a": ["cpu.weight"]}, "/", False),
        (2, "/", {".": ["cgroup.type"]}, "/", None),  # the folders above the mount are out of sight
        (2, "/", {".": ["cgroup.type", "cpu.weight"]}, "/", False),
        (2, "/elsewhere", {".": []}, "/mine", None),
    ],
)
def test_cpu_group_tells_the_root_cgroup_from_the_rest(tmp_path, version, membership, folders, mount_root, root) -> None:
    """cgroup v1: the root is the folder with cgroup.sane_behavior; v2: the nearest folder with cpu.weight
    places a process below the root, and a mount that is itself below the root (cgroup.type) hides the rest."""
    from pagecheck.grading import cpu_group

    where = cpu_group.placement(_cgroup_machine(tmp_path, version, membership, folders, mount_root))
    assert where.root is root, where.detail


def test_cpu_group_says_unknown_without_its_files(tmp_path) -> None:
    from pagecheck.grading import cpu_group

    assert cpu_group.placement(str(tmp_path / "missing")).root is None
    (tmp_path / "cgroup").write_text("5:memory:/x\n")
    (tmp_path / "mountinfo").write_text("")
    assert "no cgroup hierarchy with the cpu controller" in cpu_group.placement(str(tmp_path)).detail


@pytest.mark.parametrize(
    "switch, root, group, expected",
    [
        (None, True, "/autogroup-7 nice 0\n", "off: the kernel has no autogroup scheduling"),
        ("0\n", True, "/autogroup-7 nice 0\n", "off: autogroup scheduling is switched off"),
        ("1\n", False, "/autogroup-7 nice 0\n", "off: the grader runs in the CPU cgroup /c"),
        ("1\n", None, "/autogroup-7 nice 0\n", "off: whether the grader runs in the root CPU cgroup"),
        ("1\n", True, "", "off: the launcher's own session got no autogroup"),
        ("1\n", True, None, "off: the launcher's own session got no autogroup"),
        ("1\n", True, "/autogroup-7 nice 0\n", "on (its own session, one autogroup"),
    ],
)
def test_cpu_share_reads_the_switch_the_cgroup_and_the_group(tmp_path, monkeypatch, switch, root, group, expected) -> None:
    """The protection is on only where autogroups are enabled, the grader runs in the root CPU cgroup (the
    only one the kernel groups by session) and the launcher's session has its autogroup."""
    from pagecheck.grading import cpu_group, launcher

    for name, text in (("AUTOGROUP_SWITCH", switch), ("AUTOGROUP_OF_SELF", group)):
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        monkeypatch.setattr(launcher, name, str(path))
    protections = launcher.Protections()
    launcher._cpu_share(protections, cpu_group.Placement(root, "the CPU cgroup /c" if root is False else "why"))
    assert protections.state["cpu_share"].startswith(expected)


def test_a_run_names_what_cpu_share_off_risks_when_it_grades_side_by_side() -> None:
    from pagecheck.grading.worker_process import sandbox_notes

    every = {"landlock": "on (ABI 7)", "cpu_share": "on (its own session, one autogroup)"}
    assert sandbox_notes(every, jobs=4) == ["sandbox: every protection is on"]
    shared = {**every, "cpu_share": "off: the grader runs in the CPU cgroup /c"}
    alone, side_by_side = sandbox_notes(shared, jobs=1), sandbox_notes(shared, jobs=3)
    assert alone == ["sandbox: OFF on this machine: cpu_share: the grader runs in the CPU cgroup /c"]
    assert side_by_side[0] == alone[0] and "the other 2 graded beside it" in side_by_side[1]
    assert "--jobs 1" in side_by_side[1]


@pytest.mark.skipif(not LINUX, reason="Linux namespaces")
def test_signals_to_the_parent_change_nothing(sandbox: tuple[Subject, Session]) -> None:
    subject, session = sandbox
    parent, *kills = probe(subject, "kill_parent")
    assert parent == 1  # its parent is the sandbox's init
    # Landlock (ABI 6) refuses signals leaving the worker's domain; without it, init ignores them.
    assert all(kill[0] == ("refused" if landlock.abi_version() >= 6 else "ok") for kill in kills[:2])
    assert probe(subject, "whoami")[1] in SCRATCH_MOUNT_CANDIDATES and session.worker is not None
    assert session.worker.running


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                found.append(int(entry))
        except OSError:
            continue
    return found


@pytest.mark.skipif(not LINUX, reason="/proc")
def test_the_worker_starts_no_process_and_no_program_but_threads(sandbox: tuple[Subject, Session]) -> None:
    # A fresh interpreter started from the worker would hold none of its traps (the real SDPA, unwatched
    # gathers) and a memory limit of its own: seccomp refuses it, from Python and from native code alike.
    subject, session = sandbox
    marker = f"{os.getpid() % 9000 + 1000}.{time.time_ns() % 997}"
    popen, spawn, fork, native_fork, threads = probe(subject, "daemons", marker)
    assert [popen, spawn, fork] == [["refused", "PermissionError"]] * 3
    assert native_fork == ["ok", -1] and threads == ["ok", [2, 1]]
    time.sleep(0.5)
    assert _processes_with(marker) == []
    assert session.protections["new_processes"].startswith("on")


REWRITES_ITS_FRAMES = '''
import json, sys
# The worker's wire module where it is still reachable by name, and json.dumps, which its frames once went through.
wire = sys.modules.get("_sandbox_wire")
dumps = json.dumps

def rewritten_text(value, *args, **kwargs):
    if isinstance(value, dict) and "op" in value:
        value = {**value, "new_processes": "on (as the submission says)"}
    return dumps(value, *args, **kwargs)

json.dumps = rewritten_text
if wire is not None:
    sent = wire.write_frame

    def rewritten(fd, header, *rest):
        if isinstance(header, dict) and "op" in header:
            header = {**header, "new_processes": "on (as the submission says)"}
        return sent(fd, header, *rest)

    wire.write_frame = rewritten

def paged_attention(*args):
    return "called"
'''


def test_the_filter_is_reported_before_the_submission_runs(tmp_path: Path) -> None:
    """A submission that rewrites every frame the worker sends, from import on, cannot change what the session
    records of the seccomp filter: the worker says it in a frame sent before the subject loads."""
    with sandboxed(tmp_path, "rewrites.py", REWRITES_ITS_FRAMES) as (subject, session):
        assert subject.get("paged_attention")() == "called"
        assert "as the submission says" not in session.protections["new_processes"]
        if LINUX and os.uname().machine in ("x86_64", "aarch64"):
            assert session.protections["new_processes"].startswith("on")


DROPS_ITS_EVENTS = '''
import json, os, sys
import mlx.core as mx

# At import, every route to the pipe this submission can rebind drops the worker's event frames: os.write,
# json.dumps, and the wire module's write_frame where it is still reachable by name.
wire = sys.modules.get("_sandbox_wire")
written, dumps = os.write, json.dumps

def quiet_writes(fd, data):
    return len(data) if b'"event"' in bytes(data) else written(fd, data)

def quiet_dumps(value, *args, **kwargs):
    return dumps({} if isinstance(value, dict) and "event" in value else value, *args, **kwargs)

os.write, json.dumps = quiet_writes, quiet_dumps
if wire is not None:
    sent = wire.write_frame

    def quiet_frames(fd, header, *rest):
        return None if isinstance(header, dict) and "event" in header else sent(fd, header, *rest)

    wire.write_frame = quiet_frames

def paged_attention(*args):
    try:
        getattr(mx.fast, "scaled_" + "dot_product_attention")(
            mx.ones((1, 1, 1, 4)), mx.ones((1, 1, 2, 4)), mx.ones((1, 1, 2, 4)), scale=1.0)
    except Exception as exc:
        return type(exc).__name__
    return "not trapped"
'''


def test_a_submission_cannot_silence_the_traps(tmp_path: Path) -> None:
    """The worker writes every frame through a writer made before the subject loads: a submission that rebinds
    the wire module's write_frame, os.write and json.dumps to drop event frames still has its SDPA call
    reported."""
    with sandboxed(tmp_path, "quiet.py", DROPS_ITS_EVENTS) as (subject, session):
        assert subject.get("paged_attention")() == "ForbiddenCallError"
        assert [e["kind"] for e in session.events if e["kind"] == "sdpa_trap"] == ["sdpa_trap"]


SWAPS_ITS_PIPE = '''
import os, sys
import mlx.core as mx

REPLIES = int(sys.argv[2])  # the worker's reply descriptor, as the bootstrap reads it


def _try(action):
    try:
        action()
        return "ran"
    except OSError as exc:
        return type(exc).__name__


def paged_attention(probe):
    if probe == "close":
        return [_try(lambda: os.close(REPLIES)), _try(lambda: os.close(int(sys.argv[1]))),
                _try(lambda: os.closerange(min(REPLIES, int(sys.argv[1])), REPLIES + 1)), _try(lambda: os.fstat(REPLIES))]
    # A pipe of its own under the reply descriptor's number while the trap reports, the real one back after.
    saved = os.dup(REPLIES)
    sink_r, sink_w = os.pipe()
    swapped = _try(lambda: os.dup2(sink_w, REPLIES))
    try:
        getattr(mx.fast, "scaled_" + "dot_product_attention")(
            mx.ones((1, 1, 1, 4)), mx.ones((1, 1, 2, 4)), mx.ones((1, 1, 2, 4)), scale=1.0)
    except Exception:
        pass
    finally:
        os.dup2(saved, REPLIES, inheritable=False) if swapped == "ran" else None
    for fd in (saved, sink_r, sink_w):
        os.close(fd)
    return swapped
'''


def test_a_submission_cannot_swap_the_reply_pipe(tmp_path: Path) -> None:
    """A submission that put a pipe of its own under the reply descriptor's number (dup2) while it ran, and the
    real pipe back before it returned, had every report written meanwhile go into its pipe (red team: a dense
    gather kept 80 of 90 points beyond the course, against 0 unhidden). The worker's filter refuses to replace
    or close the protocol's descriptors, so the trap's report lands."""
    from pagecheck.grading import seccomp

    if not LINUX or os.uname().machine not in seccomp.ARCHES:
        pytest.skip("no seccomp filter on this machine")
    with sandboxed(tmp_path, "swaps.py", SWAPS_ITS_PIPE) as (subject, session):
        swapped = subject.get("paged_attention")("swap")
        assert [e["kind"] for e in session.events if e["kind"] == "sdpa_trap"] == ["sdpa_trap"], swapped
        assert swapped == "PermissionError"
        # Closed, the numbers would go to the next descriptor opened; os.closerange ignores what it cannot close.
        assert subject.get("paged_attention")("close") == ["PermissionError", "PermissionError", "ran", "ran"]
        assert "the protocol's pipes stay in place" in session.protections["new_processes"]


def test_crash_fails_the_check_and_the_next_check_restarts(sandbox: tuple[Subject, Session]) -> None:
    subject, session = sandbox
    pool = subject.get("TinyKvPagedPool")(4)
    session.begin_check("check-1")
    with pytest.raises(WorkerIncident, match="SIGSEGV") as crash:
        probe(subject, "segfault")
    assert crash.value.kind == "crashed"
    started = time.monotonic()
    with pytest.raises(WorkerIncident, match="SIGSEGV"):  # the same check: at once, the same error
        probe(subject, "whoami")
    assert time.monotonic() - started < 1
    session.begin_check("check-2")
    assert len(probe(subject, "whoami")) == 2  # a new worker answers
    with pytest.raises(StaleHandleError):
        pool.page_size
    assert [e["check"] for e in session.events if e["kind"] == "incident"] == ["check-1"]


def test_hang_is_stopped_at_the_call_deadline(tmp_path: Path) -> None:
    path = tmp_path / "hangs.py"
    path.write_text(textwrap.dedent(PROBES).replace("HARNESS_FILE", "'/nonexistent'"))
    configure(WorkerSettings(spec="{scratch}/submission/hangs.py", copy_in=str(tmp_path), call_timeout_s=2))
    try:
        subject = load_subject(f"sandbox:{path}")
        started = time.monotonic()
        with pytest.raises(WorkerIncident, match="did not finish within 2 s") as hang:
            probe(subject, "hang")
        assert hang.value.kind == "timed-out" and time.monotonic() - started < 15
        # A later call of the same check does not run, and says so (it once repeated "did not finish").
        with pytest.raises(WorkerIncident, match=r"^not run: an earlier call stopped the worker \(.*did not finish"):
            probe(subject, "whoami")
    finally:
        configure(None)
        close_sessions()


HANGS_ON_BFLOAT16_PREFILL = """
_course_attention = paged_attention


def paged_attention(query, *args, **kwargs):
    if query.dtype == mx.bfloat16 and query.shape[-2] > 1:
        while True:
            pass
    return _course_attention(query, *args, **kwargs)
"""


def test_tolerance_bounds_each_sandboxed_cell_by_check_timeout_and_goes_on(tmp_path: Path) -> None:
    """`pagecheck tolerance --subject sandbox:X --check-timeout S`: a cell stuck in the worker fails at S seconds
    (the worker's own 60 s applied, --check-timeout was ignored), and the next cell gets a new worker (every
    later cell failed "not run: an earlier call stopped the worker")."""
    from pagecheck.cli import main
    from pagecheck.exit_codes import ExitCode

    subject = tmp_path / "submission" / "hangs_on_prefill.py"
    subject.parent.mkdir()
    subject.write_text((ROOT / "tests" / "subjects" / "course_conformant.py").read_text() + HANGS_ON_BFLOAT16_PREFILL)
    out = tmp_path / "out"
    started = time.monotonic()
    code = main(["tolerance", "--quick", "--subject", f"sandbox:{subject}", "--check-timeout", "2", "--out", str(out)])
    assert code == ExitCode.TOLERANCE_EXCEEDED  # the hung cells fail
    rows = json.loads((out / "tolerance.json").read_text())["rows"]
    hung = [row for row in rows if row["dtype"] == "bfloat16" and row["query_len"] > 1]
    assert len(hung) == 2 and all("did not finish within 2 s" in row["error"] for row in hung)
    others = [row for row in rows if row not in hung]
    assert len(others) == 10 and all(row["passed"] or row["declined"] for row in others), [r["error"] for r in others]
    assert time.monotonic() - started < 100


def test_memory_limit_is_an_out_of_memory_incident(sandbox: tuple[Subject, Session]) -> None:
    subject, session = sandbox
    session.begin_check("hoards")
    with pytest.raises(WorkerIncident) as hoard:
        probe(subject, "hoard")
    assert hoard.value.kind == "out-of-memory"


def test_output_flood_is_capped_and_costs_nothing_else(sandbox: tuple[Subject, Session], tmp_path: Path) -> None:
    subject, session = sandbox
    session.close()
    log = tmp_path / "worker.log"
    configure(WorkerSettings(spec="{scratch}/submission/probes.py", copy_in=str(tmp_path), log_path=str(log)))
    try:
        flooded = load_subject(f"sandbox:{tmp_path / 'probes.py'}")
    finally:
        configure(None)
    assert probe(flooded, "shout") == "done"
    active_session().close()
    assert log.stat().st_size < (1 << 20) + 4096
    assert "more bytes of worker output dropped" in log.read_text()


LISTS_ITS_FOLDER = """
import os

def paged_attention(*args):
    here = os.path.dirname(os.path.abspath(__file__))
    return sorted(os.path.relpath(os.path.join(root, name), here)
                  for root, dirs, files in os.walk(here) for name in dirs + files if name != "__pycache__")
"""


@pytest.mark.parametrize("kind", ["package", "tiny-llm"])
def test_a_sandbox_subject_is_staged_without_following_links(tmp_path: Path, kind: str) -> None:
    """sandbox:SPEC outside grading stages the subject as grading does: a link to a file or a folder outside
    it is left out, not followed (followed, a link to a secret put the secret where the student's code reads
    it, and a link to / walked the whole disk)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("the grader's secret")
    top = tmp_path / "subject" / ("src" if kind == "tiny-llm" else "")
    package = top / "tiny_llm" if kind == "tiny-llm" else top
    package.mkdir(parents=True)
    # A tiny-llm checkout's paged_attention lives in tiny_llm/attention.py (its __init__ is never run).
    (package / "__init__.py").write_text("" if kind == "tiny-llm" else LISTS_ITS_FOLDER)
    if kind == "tiny-llm":
        (package / "attention.py").write_text(LISTS_ITS_FOLDER)
    (package / "notes.txt").write_text("the student's own file")
    (package / "secret.txt").symlink_to(outside / "secret.txt")
    (package / "outside_folder").symlink_to(outside, target_is_directory=True)
    spec = f"tiny-llm:{tmp_path / 'subject'}" if kind == "tiny-llm" else str(package)
    try:
        subject = load_subject(f"sandbox:{spec}")
        listed = subject.get("paged_attention")()
    finally:
        close_sessions()
    assert "notes.txt" in listed and "__init__.py" in listed
    assert not {"secret.txt", "outside_folder"} & set(listed), listed


def test_subject_that_does_not_load_is_a_subject_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.py"
    path.write_text("import reference.subject\n")
    with pytest.raises(SubjectError, match="reference"):
        load_subject(f"sandbox:{path}")
    close_sessions()


@pytest.mark.skipif(not LINUX, reason="Linux namespaces")
def test_a_lesser_machine_says_what_is_off_and_still_grades(tmp_path: Path) -> None:
    """Without namespaces and Landlock (as on macOS or an old kernel): reported off, and the rest still holds."""
    path = tmp_path / "probes.py"
    path.write_text(f"HARNESS_FILE = {str(HARNESS_MODULE_FILE)!r}\n" + textwrap.dedent(PROBES))
    configure(WorkerSettings(spec="{scratch}/submission/probes.py", copy_in=str(tmp_path), call_timeout_s=20,
                             leave_off=("namespaces", "landlock")))  # fmt: skip
    try:
        subject = load_subject(f"sandbox:{path}")
        session = active_session()
        off = {name for name, state in session.protections.items() if state.startswith("off")}
        assert {"pid_namespace", "network_namespace", "mount_namespace", "disk_quota", "landlock"} <= off
        assert session.protections["audit_hook"].startswith("on")
        assert probe(subject, "read_harness") == ["refused", "PermissionError"]  # the audit hook still refuses
        assert probe(subject, "import_statement") == ["refused", "ImportError"]
        assert probe(subject, "whoami")[1] != "/tmp"  # a scratch folder of its own, not a tmpfs
    finally:
        configure(None)
        close_sessions()


def test_the_scratch_never_hides_what_the_sandbox_reads(tmp_path: Path) -> None:
    # A checkout or a virtual environment under /tmp (a CI clone) moves the scratch tmpfs elsewhere.
    from pagecheck.grading.launcher import scratch_mountpoint

    assert scratch_mountpoint(["/usr"]) == SCRATCH_MOUNT_CANDIDATES[0]
    under_tmp = str(tmp_path) if str(tmp_path).startswith("/tmp/") else "/tmp"
    chosen = scratch_mountpoint(["/usr", under_tmp])
    assert chosen != "/tmp" and chosen in SCRATCH_MOUNT_CANDIDATES


def test_the_worker_never_learns_which_check_is_asking(sandbox: tuple[Subject, Session]) -> None:
    # A submission that knew the running check could behave only where that check looks; nothing it can reach
    # from its frames names it (the trusted side keeps the check to itself).
    subject, session = sandbox
    session.begin_check("pagecheck.invariants.test_zz::test_secret_check_name[case]")
    reachable = probe(subject, "strings_in_frames")
    assert len(reachable) > 10  # the walk reached the worker's frames
    assert not [text for text in reachable if "secret_check_name" in text]


def test_the_worker_reads_its_libraries_where_this_interpreter_finds_them(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.machinery
    import importlib.util

    from pagecheck.grading.worker_process import library_paths, python_read_paths

    for name in ("mlx.core", "numpy"):
        found = importlib.util.find_spec(name)
        assert found is not None and found.origin
        assert str(Path(found.origin).resolve().parents[1]) in library_paths()
    # Another folder named mlx on sys.path (a student's, the current folder's) is a portion of the namespace
    # package, not where MLX lies: it stays unreadable.
    portion = tmp_path / "portion"
    (portion / "mlx").mkdir(parents=True)
    monkeypatch.syspath_prepend(str(portion))
    assert str(portion.resolve()) not in library_paths()
    # MLX installed on PYTHONPATH, outside every site-packages folder (as on a machine with staged wheels).
    elsewhere = tmp_path / "site" / "mlx"
    elsewhere.mkdir(parents=True)
    staged = importlib.machinery.ModuleSpec("mlx.core", None, origin=str(elsewhere / "core.cpython-311-x86_64-linux-gnu.so"))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: staged if name == "mlx.core" else real(name, *rest))
    folder = str((tmp_path / "site").resolve())
    assert folder in library_paths() and folder in python_read_paths()


def test_the_preflight_worker_loads_the_project_subject_and_says_why_not_otherwise() -> None:
    from pagecheck.grading.worker_process import preflight_worker

    assert preflight_worker("cpu") is None
    why = preflight_worker("cpu", spec="/nonexistent/subject.py")
    assert why is not None and "the subject did not load in the worker" in why and "/nonexistent/subject.py" in why


def test_a_gpu_worker_without_a_gpu_refuses_to_start() -> None:
    """Never a quiet fallback to the CPU: the trusted suite would skip every GPU check, and each submission
    would get a grade made of no check (seen: 0 of 10 with verdict ok)."""
    import mlx.core as mx

    from pagecheck.grading.worker_process import preflight_worker

    if mx.is_available(mx.gpu):
        pytest.skip("this machine has a GPU")
    why = preflight_worker("gpu")
    assert why is not None and "MLX reports no GPU inside the sandboxed worker" in why


def test_grade_on_a_missing_device_stops_before_anything_is_written(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    import mlx.core as mx

    from pagecheck.cli import main
    from pagecheck.exit_codes import ExitCode

    if mx.is_available(mx.gpu):
        pytest.skip("this machine has a GPU")
    out = tmp_path / "graded"
    code = main(["grade", "--device", "gpu", str(ROOT / "tests" / "subjects" / "course_conformant.py"),
                 "--out", str(out)])  # fmt: skip
    assert code == ExitCode.DEVICE_UNAVAILABLE
    assert "device='gpu' is not available" in capsys.readouterr().err
    assert not out.exists()


def test_grade_stops_before_any_submission_when_no_worker_can_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # A machine whose sandbox cannot load MLX (as MLX's CUDA back-end inside it, measured on the H200) would
    # otherwise grade every submission load-failed, with nothing earned.
    from pagecheck.cli import main
    from pagecheck.commands import grade as grade_command
    from pagecheck.exit_codes import ExitCode

    monkeypatch.setattr(grade_command, "preflight_worker", lambda device, limits: "ImportError: no GPU memory")
    out = tmp_path / "graded"
    code = main(["grade", str(ROOT / "tests" / "subjects" / "course_conformant.py"), "--out", str(out),
                 "--seed", "s" * 32])  # fmt: skip
    assert code == ExitCode.SUITE_ERROR
    assert "no submission was graded: ImportError: no GPU memory" in capsys.readouterr().out
    assert not (out / "results").exists()


@pytest.mark.skipif(not LINUX, reason="Landlock")
def test_landlock_leaves_only_a_gpu_worker_its_own_thread_names(tmp_path: Path) -> None:
    if not landlock.abi_version():
        pytest.skip("this kernel offers no Landlock")
    probe = ("import sys, os, threading\n"
             "from pagecheck.grading import landlock\n"
             "from pagecheck.grading.worker_process import SYSTEM_READ_PATHS, python_read_paths\n"
             "landlock.restrict([*SYSTEM_READ_PATHS, *python_read_paths(), sys.argv[2]], [], [], "
             "thread_names=sys.argv[1] == 'on')\n"
             "def name():\n"
             "    try:\n"
             "        with open(f'/proc/self/task/{threading.get_native_id()}/comm', 'w') as f:\n"
             "            f.write('renamed')\n"
             "        return 'written'\n"
             "    except PermissionError:\n"
             "        return 'refused'\n"
             "found = []\n"
             "worker = threading.Thread(target=lambda: found.append(name()))\n"
             "worker.start(); worker.join()\n"
             "print(found[0], end='')\n")  # fmt: skip
    # pagecheck as the grader imports it: from the checkout, or installed apart from the tests (a GPU machine).
    roots = os.pathsep.join(str(root) for root in import_roots())
    for setting, want in (("on", "written"), ("off", "refused")):
        done = subprocess.run([sys.executable, "-c", probe, setting, str(code_roots()[0])], capture_output=True,
                              text=True, timeout=60, env={**os.environ, "PYTHONPATH": roots})  # fmt: skip
        assert done.stdout == want, done.stderr[-2000:]


def test_a_worker_event_keeps_only_report_fields_and_the_trusted_check() -> None:
    # A frame naming its own check (or the journal's own keys) misfiled events, carried hidden inputs into
    # feedback, and broke the suite's journal (red-team round 2).
    from pagecheck.grading.remote_subject import Session

    session = Session(WorkerSettings(spec="unused.py"), None)
    session.begin_check("pagecheck.invariants.test_x::real")
    session._worker_event({"kind": "introspection", "check": "x::LEAK q=[1, 2]", "nodeid": "x", "event": "y",
                           "detail": "gc.get_objects", "where": "s.py:3", "shape": [2, 8], "extra": "z"})  # fmt: skip
    assert session.events[-1] == {"detail": "gc.get_objects", "where": "s.py:3", "shape": [2, 8],
                                  "kind": "introspection", "check": "pagecheck.invariants.test_x::real"}  # fmt: skip


def test_a_worker_event_keeps_a_place_only_as_file_and_ascii_line() -> None:
    # 'attention.py:²' (a superscript passes str.isdigit(), int() refuses it) made the grader raise (red team).
    from pagecheck.grading.remote_subject import Session

    session = Session(WorkerSettings(spec="unused.py"), None)
    for where in ("attention.py:\u00b2", "attention.py", ["a.py", 3], "x" * 600 + ":12", "a\nb.py:7"):
        session._worker_event({"kind": "introspection", "detail": "gc.get_objects", "where": where})
    assert [e["where"] for e in session.events] == ["", "", "", "x" * 297 + "...:12", "a\nb.py:7"]


@pytest.mark.skipif(not LINUX, reason="Linux rlimits")
def test_an_rlimit_past_its_type_is_reported_not_fatal() -> None:
    """A limit no rlim_t holds (an OverflowError from setrlimit) is named among those not set; the others are
    set. Run in a forked child, whose limits die with it."""
    from pagecheck.grading import launcher

    config = launcher.LaunchConfig(argv=["true"], env={}, scratch_mountpoint="/", fallback_scratch="/", copy_in=None,
                                   read_paths=[], hide_paths=[], memory_bytes=8 << 30, cpu_seconds=2**70,
                                   max_processes=4096, max_file_bytes=1 << 30, disk_bytes=1 << 30)  # fmt: skip
    said_r, said_w = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.write(said_w, launcher._apply_limits(config).encode())
        finally:
            os._exit(0)
    os.close(said_w)
    with os.fdopen(said_r, "rb") as said:
        applied, _, missed = said.read().decode().partition("\n")
    os.waitpid(child, 0)
    assert "as" in applied.split(", ") and "cpu" not in applied.split(", ")
    assert missed.startswith("cpu (")


def test_sdpa_at_import_raises_but_only_a_call_after_it_is_reported(tmp_path: Path) -> None:
    """A submission that tries MLX's SDPA at import (a self-test that catches the error) lost every course point:
    the course's test reads only paged_attention's source. The call still raises; once the submission is
    loaded, a call is reported as before."""
    source = textwrap.dedent('''
        import mlx.core as mx
        try:
            mx.fast.scaled_dot_product_attention(mx.ones((1, 1, 1, 4)), mx.ones((1, 1, 2, 4)), mx.ones((1, 1, 2, 4)),
                                                 scale=1.0)
            AT_IMPORT = "ran"
        except Exception as exc:
            AT_IMPORT = type(exc).__name__

        def paged_attention(probe, *args):
            if probe == "at_import":
                return AT_IMPORT
            return mx.fast.scaled_dot_product_attention(mx.ones((1, 1, 1, 4)), mx.ones((1, 1, 2, 4)),
                                                        mx.ones((1, 1, 2, 4)), scale=1.0)
        ''')
    with sandboxed(tmp_path, "selftest.py", source) as (subject, session):
        assert probe(subject, "at_import") == "ForbiddenCallError"
        assert [e for e in session.events if e["kind"] == "sdpa_trap"] == []
        with pytest.raises(Exception, match="not allowed in graded code"):
            probe(subject, "call")
        assert [e["kind"] for e in session.events if e["kind"] == "sdpa_trap"] == ["sdpa_trap"]


LOCKS = """
import errno, fcntl, os, struct


def paged_attention():
    found = []
    with open(os.__file__, "rb") as library:  # a file every worker can read
        shared = fcntl.LOCK_SH | fcntl.LOCK_NB
        query = struct.pack("hhqqi", fcntl.F_RDLCK, 0, 0, 0, 0)
        for lock in (lambda: fcntl.flock(library, shared), lambda: fcntl.lockf(library, shared),
                     lambda: fcntl.fcntl(library, fcntl.F_GETLK, query), lambda: fcntl.fcntl(library, 37, query)):
            try:
                lock()
                found.append("taken")
            except OSError as exc:
                found.append(errno.errorcode.get(exc.errno, str(exc.errno)))
    return found
"""


SHARED = """
import ctypes, errno, mmap, os, platform

FUTEX_WAIT, FUTEX_WAKE, FUTEX_PRIVATE_FLAG = 0, 1, 128
NR = {"x86_64": {"futex": 202, "add_key": 248, "keyctl": 250, "inotify_init1": 294},
      "aarch64": {"futex": 98, "add_key": 217, "keyctl": 219, "inotify_init1": 26}}[platform.machine()]
F_NOTIFY, DN_ACCESS = 1026, 1


def paged_attention():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = libc.mmap.restype = ctypes.c_long
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]

    def outcome(done):
        return "ran" if done >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")

    def call(name, *args):
        return outcome(libc.syscall(ctypes.c_long(NR[name] if isinstance(name, str) else name), *args))

    found = {}
    with open(os.__file__, "rb") as library:  # a file every worker maps: a shared futex there is keyed by it
        shared = libc.mmap(None, mmap.PAGESIZE, mmap.PROT_READ, mmap.MAP_SHARED, library.fileno(), 0)
        first = ctypes.c_uint32.from_address(shared).value
        found["notify"] = outcome(libc.fcntl(library.fileno(), F_NOTIFY, DN_ACCESS))
        found["fadvise"] = os.posix_fadvise(library.fileno(), 0, 0, os.POSIX_FADV_DONTNEED) or "ran"
        try:
            os.preadv(library.fileno(), [bytearray(16)], 0, os.RWF_NOWAIT)
            found["nowait read"] = "ran"
        except OSError as exc:  # EOPNOTSUPP is ENOTSUP's number on Linux, named ENOTSUP by errno.errorcode
            found["nowait read"] = "EOPNOTSUPP" if exc.errno == errno.EOPNOTSUPP else errno.errorcode.get(exc.errno, "?")
    own = ctypes.c_int32(0)
    futex = lambda address, op, value: call("futex", ctypes.c_void_p(address), ctypes.c_int(op), ctypes.c_int(value),
                                            None, None, ctypes.c_int(0))
    found["shared wake"] = futex(shared, FUTEX_WAKE, 1)
    found["shared wait"] = futex(shared, FUTEX_WAIT, first + 1)  # not the word's value: returns at once
    found["private wake"] = futex(ctypes.addressof(own), FUTEX_WAKE | FUTEX_PRIVATE_FLAG, 1)
    found["futex_waitv"] = call(449, None, ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0))
    found["add_key"] = call("add_key", b"user", b"k", b"v", ctypes.c_long(1), ctypes.c_long(-3))
    found["keyctl"] = call("keyctl", ctypes.c_long(0), ctypes.c_long(-3))
    found["inotify"] = call("inotify_init1", ctypes.c_long(0))
    found["cachestat"] = call(451, ctypes.c_long(0), None, None, ctypes.c_long(0))
    # pthread_join waits on a shared futex: a thread of the worker's own is still joined.
    worker = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)(lambda _: None)
    thread = ctypes.c_ulong()
    libc.pthread_create(ctypes.byref(thread), None, worker, None)
    found["join"] = "ran" if libc.pthread_join(thread, None) == 0 else "failed"
    return found
"""


def test_the_worker_shares_nothing_another_worker_could_see(tmp_path: Path) -> None:
    """Workers side by side talked through what the kernel keeps per file or per user (red team): a shared futex
    on a word of a library every worker maps (woken from another submission's worker), the key store
    (/proc/keys lists every key of the user: the hidden pass's inputs reached the public pass's feedback, and one
    submission ran another's code), inotify and dnotify on shared files, and the page cache (evicted by
    posix_fadvise, probed by RWF_NOWAIT reads). Each is refused; the worker's own threads still join."""
    from pagecheck.grading import seccomp

    if os.uname().machine not in seccomp.ARCHES:
        pytest.skip("no seccomp filter on this machine")
    with sandboxed(tmp_path, "shared.py", SHARED) as (subject, session):
        session.begin_check("shared")
        found = subject.get("paged_attention")()
        said = session.protections.get("new_processes", "")
    if loads_cuda("cpu"):
        # MLX's CUDA back-end is loaded in every worker here: its driver shares memory with its own threads, so
        # sharing stays allowed (seccomp.program's refuse_shared), said so, and `grade` runs one submission at a
        # time (tests/test_grading_plan.py holds that).
        assert found["add_key"] != "ENOSYS" and found["inotify"] != "ENOSYS" and found["join"] == "ran", found
        assert "nothing shared with other workers" not in said and said.startswith("on"), said
        return
    assert found == {
        "notify": "EPERM", "fadvise": "ran", "nowait read": "EOPNOTSUPP", "shared wake": "EPERM",
        "shared wait": "EAGAIN", "private wake": "ran", "futex_waitv": "ENOSYS", "add_key": "ENOSYS",
        "keyctl": "ENOSYS", "inotify": "ENOSYS", "cachestat": "ENOSYS", "join": "ran",
    }
    assert "nothing shared with other workers" in said


def test_the_worker_takes_no_file_lock(tmp_path: Path) -> None:
    """A lock on a file every worker reads is seen by every other worker: its position carried the hidden pass's
    inputs to the public pass's feedback, and one submission's source to another's worker (red team, 80/80 for a
    submission with no code). Every lock call is ENOLCK."""
    from pagecheck.grading import seccomp

    if os.uname().machine not in seccomp.ARCHES:
        pytest.skip("no seccomp filter on this machine")
    with sandboxed(tmp_path, "locks.py", LOCKS) as (subject, session):
        session.begin_check("locks")
        found = subject.get("paged_attention")()
        said = session.protections.get("new_processes", "")
    if loads_cuda("cpu"):  # locks stay allowed where MLX's CUDA back-end is loaded (see the test above)
        assert "ENOLCK" not in found and "no file lock" not in said, (found, said)
        return
    assert found == ["ENOLCK"] * 4
    assert "no file lock" in said


ARRAY_SUBCLASSES = '''
import mlx.core as mx
import numpy as np


class ListShape(np.ndarray):
    @property
    def shape(self):
        return list(np.ndarray.shape.__get__(self))

    def tolist(self):
        return "its own"


class MxListShape(mx.array):
    @property
    def shape(self):
        return list(mx.array.shape.__get__(self))


class Finalized(np.ndarray):
    def __array_finalize__(self, obj):
        pass


def TinyKvPagedPool(kind, given=None):  # a call other than the attention: its arrays keep their own names
    if kind == "back":
        return type(given).__name__
    table = np.arange(6, dtype=np.int32).reshape(3, 2)
    return {"numpy": table.view(ListShape), "mlx": MxListShape(mx.array(table)), "plain": table.view(Finalized)}[kind]
'''


def test_an_array_subclass_answers_its_own_names_on_the_trusted_side(tmp_path: Path) -> None:
    """A table of an ndarray subclass whose .shape property answers a list crossed as a plain array, so the suite
    read (3, 2) where the course's `block_table.shape == (3, 2)` reads [3, 2] and fails (Rule 2): its own names
    are read on the worker's object, its values cross as before, and it goes back to the worker as a plain copy."""
    with sandboxed(tmp_path, "subclasses.py", ARRAY_SUBCLASSES) as (subject, session):
        call = subject.get("TinyKvPagedPool")
        table = call("numpy")
        assert isinstance(table, np.ndarray) and table.shape == [3, 2] and table.tolist() == "its own"
        assert np.ndarray.tolist(table) == [[0, 1], [2, 3], [4, 5]] and table[1].shape == (2,)
        assert call("back", table) == "ndarray"
        table = call("mlx")
        assert isinstance(table, mx.array) and table.shape == [3, 2] and table.tolist() == [[0, 1], [2, 3], [4, 5]]
        assert call("back", table) == "array"
        plain = call("plain")  # special methods alone (NumPy's protocols): its values
        assert type(plain) is np.ndarray and plain.shape == (3, 2)


DEFERRED_OUTPUT = """
import numpy as np


class Deferred(np.ndarray):
    def astype(self, dtype, *args, **kwargs):
        return np.full(self.shape, 7.0).astype(dtype)


def paged_attention(*args):
    return np.zeros((1, 2, 1, 4), dtype=np.float32).view(Deferred)


def TinyKvPagedPool(*args):  # any other call: a table of such a class, say
    return np.zeros((1, 2), dtype=np.int32).view(Deferred)
"""


def test_an_attention_output_of_an_array_class_of_its_own_crosses_as_its_values(tmp_path: Path) -> None:
    """An output whose class defines an astype of its own came back as a SandboxedArray, whose astype the checks'
    conversion then ran in the worker after the call, outside its watch (a red-team submission computed its output
    there with MLX's fused attention; it failed only because a dtype cannot cross). The attention's output now
    crosses as its values alone; any other call's array of such a class still reads its names on the worker."""
    with sandboxed(tmp_path, "deferred.py", DEFERRED_OUTPUT) as (subject, _):
        out = subject.get("paged_attention")()
        assert type(out) is np.ndarray and out.astype(np.float64).tolist() == [[[[0.0] * 4] * 1] * 2]
        other = subject.get("TinyKvPagedPool")()
        assert type(other) is not np.ndarray and isinstance(other, np.ndarray)  # a SandboxedArray
