"""The trusted side's end of one worker: starting it in the sandbox, one request at a time, and its deaths.

A WorkerProcess starts the sandbox launcher (launcher.py), hands the worker
its code and settings, and then sends requests and reads replies with a
deadline per call. Everything the worker sends is checked by wire.py before
it is used. When a call ends the worker (a crash, the deadline, a reply that
breaks the protocol, an allocation failure), the whole sandbox is killed,
and the call raises a WorkerIncident naming what happened; the owner
(remote_subject.py) decides when to start a new one.

Worker output (its stdout and stderr, and its children's) goes through a
pipe that a thread drains into the log: the first LOG_LIMIT_BYTES are kept,
the rest are counted and dropped, so no amount of output slows the grader
or fills its disk.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import site
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from pagecheck.grading import wire
from pagecheck.grading.launcher import SCRATCH_PLACEHOLDER, SETUP_FAILED, LaunchConfig, read_status, scratch_mountpoint
from pagecheck.grading.sandbox import GIB, gib, loads_cuda, memory_kind_for
from pagecheck.grading.worker_main import BOOTSTRAP, bootstrap_message

LOG_LIMIT_BYTES = 1 << 20
KILL_WAIT_S = 10.0
GRACE_S = 1.0
OOM_RSS_FRACTION = 0.5  # a worker killed by a signal after touching this much of its allowance ran out of memory
# Read-only everywhere: the system's libraries and tools hold nothing of the grader.
SYSTEM_READ_PATHS = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc/ld.so.cache", "/etc/ld.so.conf",
                     "/etc/ld.so.conf.d", "/etc/localtime", "/etc/alternatives", "/proc", "/sys/devices/system/cpu",
                     "/sys/fs/cgroup")  # fmt: skip
GPU_READ_PATHS = ("/proc/driver", "/sys", "/etc/nvidia", "/usr/share/nvidia")
# The sources the worker runs, in order; none of them imports pagecheck.
WORKER_MODULES = ("wire", "subject", "injection", "tripwires", "seccomp", "worker_main")
WORKER_LIBRARIES = ("mlx", "numpy")  # the worker imports them before the subject loads
WORKER_LIBRARY_FILES = {"mlx": "mlx.core", "numpy": "numpy"}  # a module of each with a file of its own
# The suite's own modules the worker runs (standard library only): the very same source as in process, the
# subject loader and what a check installs in place of a subject's method.
INVARIANTS_MODULES = {"subject": "pagecheck.invariants.subject", "injection": "pagecheck.invariants.injection"}
WORKER_ENV = {
    "HOME": SCRATCH_PLACEHOLDER,
    "TMPDIR": SCRATCH_PLACEHOLDER,
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "MALLOC_ARENA_MAX": "2",  # glibc reserves 64 MiB of address space per thread arena; RLIMIT_AS counts it
    "MLX_ENABLE_TF32": "0",
    "PYTHONHASHSEED": "0",
}


@dataclass(frozen=True)
class WorkerLimits:
    memory_bytes: int = 4 * GIB
    cpu_seconds: int = 900
    max_processes: int = 64
    max_file_bytes: int = 256 << 20
    disk_bytes: int = 512 << 20
    # "data" for a worker that loads MLX's CUDA back-end (sandbox.Limits.memory_kind)
    memory_kind: str = field(default_factory=memory_kind_for)


@dataclass(frozen=True)
class WorkerSettings:
    spec: str  # the subject spec inside the worker; SCRATCH_PLACEHOLDER stands for its scratch folder
    copy_in: str | None = None  # a folder whose contents become SCRATCH/submission
    import_paths: tuple[str, ...] = ()  # inside the worker, SCRATCH_PLACEHOLDER allowed
    strict: bool = True  # False only for this project's own subjects (reference, impl)
    device: str = "cpu"
    limits: WorkerLimits = field(default_factory=WorkerLimits)
    call_timeout_s: float = 60.0
    start_timeout_s: float = 120.0
    log_path: str | None = None
    hide_paths: tuple[str, ...] = ()
    extra_read_paths: tuple[str, ...] = ()
    leave_off: tuple[str, ...] = ()  # sandbox mechanisms not to use (launcher.LEAVABLE), to see a lesser machine

    def as_json(self) -> str:
        return json.dumps(asdict(self))

    @staticmethod
    def from_json(text: str) -> "WorkerSettings":
        document = json.loads(text)
        document["limits"] = WorkerLimits(**document.get("limits", {}))
        for name in ("import_paths", "hide_paths", "extra_read_paths", "leave_off"):
            document[name] = tuple(document.get(name, ()))
        return WorkerSettings(**document)


class WorkerIncident(RuntimeError):
    """The worker died during a call, or the call ran past its deadline. `kind`: crashed, timed-out,
    out-of-memory or protocol."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class SandboxStartError(RuntimeError):
    """The worker could not be started, or its subject did not load; the message says which."""


HARNESS_PACKAGES = ("pagecheck", *(f"pagecheck.{layer}" for layer in
                                  ("reference", "ext", "impl", "serving", "invariants", "reports")))


def harness_roots() -> list[str]:
    """The folders of pagecheck's own packages: hidden from the worker, and refused to it by path."""
    roots = []
    # pagecheck and its layers (an editable install keeps each layer in its own folder of the checkout),
    # and a checkout's tests (its mutants and fixtures).
    for name in (*HARNESS_PACKAGES, "tests"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            roots.extend(str(Path(p).resolve()) for p in spec.submodule_search_locations)
    return sorted(set(roots))


def library_paths() -> list[str]:
    """Where the worker imports its libraries from: the site-packages folders, and the folders that hold the
    MLX and NumPy this interpreter finds (an install on PYTHONPATH puts them elsewhere; the worker reads no
    PYTHONPATH)."""
    paths = list(site.getsitepackages())
    for name in WORKER_LIBRARIES:
        # By the file of the module itself: `mlx` is a namespace package, whose search locations would include
        # any folder named mlx on sys.path (the current folder's, a student's).
        spec = importlib.util.find_spec(WORKER_LIBRARY_FILES[name])
        if spec is None or spec.origin is None:
            continue
        folder = Path(spec.origin).resolve().parent
        while folder.name != name and folder != folder.parent:
            folder = folder.parent
        if folder.name != name:  # no folder of the library's name above its module: nothing to add
            continue
        if str(folder.parent) not in paths:
            paths.append(str(folder.parent))
    return paths


def python_read_paths() -> list[str]:
    """What the worker's Python needs to read: its installation, the environment and its libraries."""
    paths = {sys.base_prefix, sys.base_exec_prefix, sys.prefix, sys.exec_prefix,
             str(Path(sys.executable).resolve().parent), str(Path(sys.executable).parent)}  # fmt: skip
    paths.update(library_paths())
    return sorted(str(Path(p).resolve()) for p in paths if p and Path(p).exists())


def _source(module: str) -> str:
    spec = importlib.util.find_spec(INVARIANTS_MODULES.get(module, f"pagecheck.grading.{module}"))
    if spec is None or spec.origin is None:
        raise SandboxStartError(f"the worker's module {module} is missing from the installation")
    return Path(spec.origin).read_text(encoding="utf-8")


def worker_sources() -> list[tuple[str, str]]:
    return [(name, _source(name)) for name in WORKER_MODULES]


class OutputDrain(threading.Thread):
    """Copies the worker's output into the log (standard error without one), up to LOG_LIMIT_BYTES; the rest
    is read and dropped."""

    def __init__(self, fd: int, log_path: str | None) -> None:
        super().__init__(daemon=True, name="worker-output")
        self.fd = fd
        self.log_path = log_path
        self.dropped = 0

    def run(self) -> None:
        kept = 0
        log = open(self.log_path, "ab") if self.log_path else os.fdopen(os.dup(2), "wb")
        try:
            while chunk := os.read(self.fd, 1 << 16):
                room = max(0, LOG_LIMIT_BYTES - kept)
                if room:
                    log.write(chunk[:room])
                    log.flush()
                    kept += min(room, len(chunk))
                self.dropped += len(chunk) - min(room, len(chunk))
        except OSError:
            pass
        finally:
            if self.dropped:
                log.write(f"\n[pagecheck: {self.dropped} more bytes of worker output dropped]\n".encode())
            log.close()
            os.close(self.fd)


class WorkerProcess:
    """One running sandbox with the subject loaded, or the reason it is not running."""

    def __init__(self, settings: WorkerSettings, on_event: Callable[[dict[str, Any], bool], None]) -> None:
        self.settings = settings
        # Called with each event frame and whether the worker wrote it (numbered in turn, a JSON object, no
        # buffers); an event it did not write was forged by the submission, which shares its process.
        self.on_event = on_event
        self._next_seq = 0  # the number (wire.SEQ) of the worker's next frame
        self.protections: dict[str, str] = {}
        self.names: dict[str, str] = {}
        self.missing: dict[str, str] = {}
        self.origin = ""
        self.scratch = ""  # the worker's scratch folder, as its paths show it
        self.shown: dict[str, str] = {}  # API name -> how it prints in process (module.qualname, for classes)
        self._launcher: subprocess.Popen[bytes] | None = None
        self._to_worker = -1
        self._reader: wire.FrameReader | None = None
        self._status_fd = -1
        self._status_text = ""
        self._drain: OutputDrain | None = None
        self._scratch: str | None = None

    # -- start ---------------------------------------------------------------------------------------------------

    def _launch_config(self, fds: dict[str, int], scratch: str) -> LaunchConfig:
        settings = self.settings
        read_paths = [*SYSTEM_READ_PATHS, *python_read_paths(), *settings.extra_read_paths]
        device_paths: list[str] = []
        if loads_cuda(settings.device):  # MLX's CUDA back-end opens the GPU's files at import, whatever the device
            read_paths += GPU_READ_PATHS
            device_paths = sorted(str(p) for p in Path("/dev").glob("nvidia*")) + ["/dev/dri"]
        limits = settings.limits
        return LaunchConfig(
            argv=[sys.executable, "-I", "-S", "-c", BOOTSTRAP, str(fds["worker_in"]), str(fds["worker_out"])],
            env=dict(WORKER_ENV),
            scratch_mountpoint=scratch_mountpoint(read_paths),
            fallback_scratch=scratch,
            copy_in=settings.copy_in,
            read_paths=sorted(set(read_paths)),
            hide_paths=sorted({*settings.hide_paths, *(harness_roots() if settings.strict else ())}),
            memory_bytes=limits.memory_bytes,
            cpu_seconds=limits.cpu_seconds,
            max_processes=limits.max_processes,
            max_file_bytes=limits.max_file_bytes,
            disk_bytes=limits.disk_bytes,
            pass_fds=[fds["worker_in"], fds["worker_out"]],
            status_fd=fds["status"],
            device_paths=device_paths,
            leave_off=list(settings.leave_off),
            memory_kind=limits.memory_kind,
        )

    def start(self) -> None:
        """Start the sandbox and load the subject; SandboxStartError when either fails."""
        settings = self.settings
        self._scratch = tempfile.mkdtemp(prefix="pagecheck-worker-")
        os.chmod(self._scratch, 0o711)
        request_r, request_w = os.pipe()
        reply_r, reply_w = os.pipe()
        for fd in (request_w, reply_w):
            _widen_pipe(fd)
        status_r, status_w = os.pipe()
        log_r, log_w = os.pipe()
        config_r, config_w = os.pipe()
        fds = {"worker_in": request_r, "worker_out": reply_w, "status": status_w}
        config = self._launch_config(fds, self._scratch)
        env = {"PATH": os.environ.get("PATH", os.defpath), "LANG": os.environ.get("LANG", "C.UTF-8"),
               "PYTHONPATH": os.pathsep.join(code_roots()), "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip
        try:
            self._launcher = subprocess.Popen(
                [sys.executable, "-m", "pagecheck.grading.launcher", str(config_r)],
                pass_fds=(config_r, request_r, reply_w, status_w),
                stdin=subprocess.DEVNULL, stdout=log_w, stderr=log_w, env=env, start_new_session=True,
                cwd="/",
            )  # fmt: skip
        finally:
            for fd in (config_r, request_r, reply_w, status_w, log_w):
                os.close(fd)
        self._drain = OutputDrain(log_r, settings.log_path)
        self._drain.start()
        with os.fdopen(config_w, "w") as file:
            file.write(json.dumps(asdict(config)))
        self._to_worker, self._status_fd = request_w, status_r
        self._reader = wire.FrameReader(reply_r)
        worker_config = {
            "spec": settings.spec, "import_paths": list(settings.import_paths), "strict": settings.strict,
            "device": settings.device, "loads_cuda": loads_cuda(settings.device),
            "harness_roots": harness_roots() if settings.strict else [],
            "site_paths": library_paths(),
        }  # fmt: skip
        try:
            self._write_raw(bootstrap_message(worker_sources(), worker_config))
            deadline = time.monotonic() + settings.start_timeout_s
            header, _ = self._read_reply(deadline, "starting the worker")
            # The protections the worker set before the subject loaded, in a frame of their own: the subject's
            # code runs after it and can rewrite any frame the worker sends from then on.
            armed = header if header.get("op") == "armed" else {}
            if armed:
                header, _ = self._read_reply(deadline, "loading the subject")
        except WorkerIncident as incident:
            raise SandboxStartError(f"the worker did not start: {incident}") from None
        finally:
            self._read_status()
        self.scratch = wire.clean_text(header.get("scratch", ""), 500)
        if header.get("op") == "load_failed":
            error = wire.error_from(header.get("error"))
            self.stop()
            raise SandboxStartError(f"the subject did not load in the worker: {error}")
        if header.get("op") != "ready":
            self.stop()
            raise SandboxStartError(f"the worker answered {str(header.get('op'))[:50]!r} instead of ready")
        if settings.strict:
            self.protections["audit_hook"] = "on (imports and reads of pagecheck, gc introspection, re-imports of MLX)"
        else:
            self.protections["audit_hook"] = "off: this project's own subject, which imports pagecheck"
        self.protections["new_processes"] = wire.clean_text(
            armed.get("new_processes", "off: not reported before the subject loaded"), 200
        )
        self.names = {str(k): str(v) for k, v in dict(header.get("names", {})).items()}
        self.missing = {str(k): wire.clean_text(v, 300) for k, v in dict(header.get("missing", {})).items()}
        self.origin = wire.clean_text(header.get("origin", ""), 500)
        self.shown = {str(k): wire.clean_text(v, 200) for k, v in dict(header.get("shown", {})).items()}

    def _write_raw(self, data: bytes) -> None:
        try:
            view = memoryview(data)
            while view.nbytes:
                view = view[os.write(self._to_worker, view) :]
        except OSError:
            raise self._ended("the worker closed its pipe") from None

    # -- calls ---------------------------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._launcher is not None and self._launcher.poll() is None

    def request(self, header: dict[str, Any], buffers: list[Any], what: str) -> tuple[dict[str, Any], list[bytearray]]:
        """Send one request and return its reply, or raise WorkerIncident (after which this worker is gone)."""
        if self._launcher is None:
            raise WorkerIncident("crashed", "the worker is not running")
        try:
            wire.write_frame(self._to_worker, header, buffers)
        except OSError:
            raise self._ended(f"the worker closed its pipe before {what}") from None
        return self._read_reply(time.monotonic() + self.settings.call_timeout_s, what)

    def _read_reply(self, deadline: float, what: str) -> tuple[dict[str, Any], list[bytearray]]:
        assert self._reader is not None
        while True:
            try:
                header, buffers = self._reader.read(deadline)
            except wire.FrameTimeout:
                self.stop()
                raise WorkerIncident(
                    "timed-out", f"{what} did not finish within {self.settings.call_timeout_s:g} s; the worker was "
                    "stopped"
                ) from None
            except wire.ProtocolError as exc:
                if "the pipe closed" in str(exc):
                    raise self._ended(f"the worker died during {what}") from None
                self.stop()
                raise WorkerIncident("protocol", f"{what}: the worker broke the protocol ({exc})") from None
            # The worker numbers every frame it writes (wire.frame_writer). A number past the next one means frames
            # it wrote never got here: read or swallowed by the submission, which shares its process and pipe (a
            # frame of its own that declares a buffer takes the next frames as that buffer's bytes). No number,
            # or one already seen, is a frame the worker did not write.
            seq = header.get(wire.SEQ)
            if type(seq) is int and seq > self._next_seq:
                missing = f"{self._next_seq}" + (f" to {seq - 1}" if seq - 1 > self._next_seq else "")
                self.stop()
                raise WorkerIncident("protocol", f"{what}: frame {missing} of the worker's never arrived (its pipe "
                                                 "was read or written by other code)")  # fmt: skip
            written = type(seq) is int and seq == self._next_seq
            self._next_seq += written
            if "event" in header:
                event = header["event"]
                genuine = written and isinstance(event, dict) and not buffers
                self.on_event(event if isinstance(event, dict) else {"kind": type(event).__name__}, genuine)
                continue
            if not written:
                self.stop()
                raise WorkerIncident("protocol", f"{what}: the worker's pipe carried a reply the worker did not "
                                                 "write")  # fmt: skip
            return header, buffers

    # -- ends ----------------------------------------------------------------------------------------------------

    def _read_status(self) -> dict[str, Any]:
        """Every status line init has written so far; the last "exit" report among them."""
        if self._status_fd < 0:
            return {}
        while wire.readable(self._status_fd, 0):
            chunk = os.read(self._status_fd, 1 << 16)
            if not chunk:
                break
            self._status_text += chunk.decode("utf-8", "replace")
        report: dict[str, Any] = {}
        for line in self._status_text.splitlines():
            try:
                document = json.loads(line)
            except ValueError:
                continue
            if isinstance(document, dict) and "protections" in document:  # init's, each a fuller copy
                self.protections.update({str(k): str(v) for k, v in dict(document["protections"]).items()})
            elif isinstance(document, dict):
                report = document
        return report

    def _wait_launcher(self) -> int | None:
        if self._launcher is None:
            return None
        try:
            return self._launcher.wait(timeout=KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            self._kill()
            return self._launcher.wait()

    def _ended(self, what: str) -> WorkerIncident:
        """The worker is gone: how it ended, as the incident to raise. Stops what is left of the sandbox."""
        code = self._wait_launcher()
        report = self._read_status()
        self.stop()
        exit_code = report.get("exit", code)
        if exit_code == SETUP_FAILED and "exit" not in report:
            return WorkerIncident("crashed", f"{what}: the sandbox could not be set up (see the worker log)")
        if not isinstance(exit_code, int) or exit_code <= 128:
            return WorkerIncident("crashed", f"{what}: it exited with status {exit_code}")
        try:
            name = signal.Signals(exit_code - 128).name
        except ValueError:
            name = f"signal {exit_code - 128}"
        rss = int(report.get("maxrss_kb", 0)) * 1024
        limit = self.settings.limits.memory_bytes
        if rss >= OOM_RSS_FRACTION * limit:
            return WorkerIncident("out-of-memory", f"{what}: it was killed by {name} with {rss / GIB:.2f} GB "
                                                   f"resident of its {gib(limit)} GB limit")  # fmt: skip
        if name == "SIGXCPU":
            return WorkerIncident("timed-out", f"{what}: it used up its {self.settings.limits.cpu_seconds} CPU seconds")
        return WorkerIncident("crashed", f"{what}: it was killed by {name}")

    def _kill(self) -> None:
        if self._launcher is None:
            return
        try:
            os.killpg(self._launcher.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self) -> None:
        """End the sandbox and everything in it; safe to call more than once. A worker that is waiting for a
        request gets end-of-file and a moment to exit on its own, then everything is killed."""
        if self._launcher is None:
            return
        if self._to_worker >= 0:
            os.close(self._to_worker)
            self._to_worker = -1
            try:
                self._launcher.wait(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        self._kill()
        self._launcher.wait()
        for fd in (self._to_worker, self._status_fd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        if self._reader is not None:
            try:
                os.close(self._reader.fd)
            except OSError:
                pass
        self._to_worker = self._status_fd = -1
        self._reader = None
        self._launcher = None
        if self._drain is not None:
            self._drain.join(timeout=KILL_WAIT_S)
        if self._scratch is not None:
            _remove_tree(self._scratch)
            self._scratch = None


def preflight_worker(device: str, limits: WorkerLimits | None = None, spec: str = "reference",
                     timeout_s: float = 120.0) -> str | None:
    """Why a sandboxed worker cannot load a subject on this machine with MLX on `device`, under `limits` (the
    run's); None when it can.
    The grader asks once, with this project's own subject, before any submission, so that a fault of the
    machine (MLX's GPU back-end failing inside the sandbox, say) is not graded as every submission's."""
    roots = tuple(code_roots())
    folder = tempfile.mkdtemp(prefix="pagecheck-preflight-")
    log = os.path.join(folder, "worker.log")
    settings = WorkerSettings(spec=spec, strict=False, device=device, import_paths=roots, extra_read_paths=roots,
                              limits=limits or WorkerLimits(), start_timeout_s=timeout_s, log_path=log)  # fmt: skip
    worker = WorkerProcess(settings, on_event=lambda event, genuine: None)
    try:
        worker.start()
        return None
    except SandboxStartError as exc:
        try:
            lines = Path(log).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            lines = []
        cause = next((line.strip() for line in reversed(lines) if "Error" in line), "")
        return f"{exc}" + (f" ({cause[:300]})" if cause else "")
    finally:
        worker.stop()
        _remove_tree(folder)


def code_roots() -> list[str]:
    """Where the launcher imports pagecheck from (it runs before the sandbox exists)."""
    spec = importlib.util.find_spec("pagecheck")
    assert spec is not None and spec.submodule_search_locations
    return sorted({str(Path(p).resolve().parent) for p in spec.submodule_search_locations})


def _remove_tree(path: str) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def probe_protections(timeout_s: float = 60.0) -> dict[str, str]:
    """The protections a sandbox gets on this machine, found by starting one that runs /bin/true."""
    status_r, status_w = os.pipe()
    config_r, config_w = os.pipe()
    scratch = tempfile.mkdtemp(prefix="pagecheck-probe-")
    read_paths = sorted({*SYSTEM_READ_PATHS, *python_read_paths()})
    config = LaunchConfig(
        argv=["/bin/true"], env=dict(WORKER_ENV), scratch_mountpoint=scratch_mountpoint(read_paths),
        fallback_scratch=scratch, copy_in=None, read_paths=read_paths, hide_paths=harness_roots(),
        memory_bytes=WorkerLimits().memory_bytes, cpu_seconds=10, max_processes=8, max_file_bytes=1 << 20,
        disk_bytes=1 << 20, status_fd=status_w,
    )  # fmt: skip
    env = {"PATH": os.environ.get("PATH", os.defpath), "PYTHONPATH": os.pathsep.join(code_roots())}
    try:
        launcher = subprocess.Popen([sys.executable, "-m", "pagecheck.grading.launcher", str(config_r)],
                                    pass_fds=(config_r, status_w), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                                    start_new_session=True, cwd="/")  # fmt: skip
    finally:
        os.close(config_r)
        os.close(status_w)
    with os.fdopen(config_w, "w") as file:
        file.write(json.dumps(asdict(config)))
    try:
        launcher.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait()
    protections, _ = read_status(status_r)
    _remove_tree(scratch)
    return protections or {"sandbox": "off: the sandbox could not be started on this machine"}


def protections_off(protections: dict[str, str]) -> list[str]:
    """'name: why' for each protection that is off."""
    return [f"{name}: {state.removeprefix('off: ')}" for name, state in sorted(protections.items())
            if not state.startswith("on")]  # fmt: skip


def sandbox_notes(protections: dict[str, str], jobs: int) -> list[str]:
    """What a grading run says of its sandbox before it starts: the protections that are off, and, where
    submissions share the CPU thread by thread (cpu_share off) and more than one is graded at once, what that
    risks and the remedy."""
    off = protections_off(protections)
    notes = ["sandbox: every protection is on" if not off else "sandbox: OFF on this machine: " + "; ".join(off)]
    if jobs > 1 and not protections.get("cpu_share", "on").startswith("on"):
        notes.append(
            f"sandbox: with cpu_share off, a submission that runs many busy threads takes CPU from the other "
            f"{jobs - 1} graded beside it, whose calls then run slower toward their time limit; --jobs 1 grades "
            "one submission at a time"
        )
    return notes


F_SETPIPE_SZ = 1031
PIPE_BYTES = 1 << 20


def _widen_pipe(fd: int) -> None:
    """A larger pipe buffer: a reply with arrays is written without waiting for the reader (Linux only)."""
    try:
        import fcntl

        fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_BYTES)
    except (OSError, ImportError):
        pass
