"""A subject whose code runs in the sandboxed worker: `--pagecheck-subject sandbox:SPEC`.

load_sandbox_subject returns an ordinary Subject whose four API names are
proxies, so the invariants suite runs unchanged:

    paged_attention                          RemoteApi: calling it calls the worker's function
    TinyKvPagedPool, TinyKvPagedCache,       RemoteApi: calling it constructs an instance in the
    BatchingKvCache                          worker and returns a RemoteObject, a handle to it

A RemoteObject forwards attribute reads and writes, calls and the common
special methods. Arguments and results cross as values (arrays by their
bytes, in their library and dtype) except objects the worker holds, which
cross as handles; the same worker object always comes back as the same
RemoteObject, so identity holds (a cache given a pool gets that pool). An
array argument that the call changed in place is changed in the caller too,
and an array read from the worker goes back to it as the worker's own array
while that holds the same values (wire.OriginOf), so the change reaches the
subject's objects as it would in process.

The Session owns the worker. The child plugin tells it when each check
begins; a worker that died stays dead for the rest of that check (every
later call raises the same WorkerIncident at once) and a new one is started
for the next check that calls the subject. Objects of a worker that ended
raise StaleHandleError.

Standalone (`pytest --pyargs pagecheck.invariants --pagecheck-subject sandbox:SPEC`), SPEC is a .py file,
a package folder or tiny-llm:PATH, staged into the worker's scratch folder, or `reference` or
`impl`, this project's own subjects, which the worker may import (they test
the transport, never a student). Grading configures the Session through
`configure` with the staged submission instead.
"""

from __future__ import annotations

import atexit
import collections
import dataclasses
import functools
import re
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any

from pagecheck.grading import wire
from pagecheck.grading.launcher import SCRATCH_PLACEHOLDER, SUBMISSION_DIR
from pagecheck.grading.submission import Submission, SubmissionFilesError, stage_copy
from pagecheck.grading.worker_process import (
    SandboxStartError,
    WorkerIncident,
    WorkerProcess,
    WorkerSettings,
    harness_roots,
)
from pagecheck.invariants.subject import (
    API_NAMES,
    BUILT_IN_SUBJECTS,
    SANDBOX_PREFIX,
    TINY_LLM_PREFIX,
    resolved,
    Subject,
    SubjectError,
    register_prefix_loader,
)

LOAD_STEP = "(import)"
MEMORY_ERROR = "MemoryError"
# Requests that change nothing in the worker, as far as the protocol goes: attribute reads are remembered
# until a request of any other kind (a call, a write, an item assignment) is sent.
READ_ONLY_OPS = frozenset({"getattr", "release"})
SMALL_VALUE_ITEMS = 4096
MAX_EVENTS = 2000  # reports of one kind kept per session (incidents are always kept)
# The kinds the worker reports (worker_main.py's audit hook, tripwires.py). Student code shares the worker's
# process and can write frames to its pipe, so an event of any other kind (an "incident" among them: only this
# side records those) is a forged frame, recorded as FORGED_EVENT; and reports are capped per kind, so that a
# flood of one kind cannot crowd another out.
WORKER_EVENT_KINDS = frozenset({"sdpa_trap", "gather_trap", "harness_import", "harness_read", "introspection",
                                "reimport", wire.PIPE_SWAP})
FORGED_EVENT = "forged_event"
# The fields an event keeps: those the worker's reports and the trusted side's incidents carry.
EVENT_FIELDS = frozenset({"detail", "where", "op", "shape", "incident"})


# A report's place: the file the worker names (the code object's, which the submission chooses) and a line in ASCII
# digits (str.isdigit() also takes '²', which int() refuses).
LINE_NUMBER = re.compile(r"[0-9]{1,9}")
PLACE = re.compile(rf"(.+):({LINE_NUMBER.pattern})", re.S)


def _place(value: Any) -> str:
    """A report's `where` as file:line, the file cut to 300 characters; "" (no place) when it is not one."""
    found = PLACE.fullmatch(value) if isinstance(value, str) else None
    return f"{wire.clean_text(found[1], 300)}:{found[2]}" if found else ""


def _plain_field(value: Any) -> Any:
    """A report's non-text field as plain data: a short list of integers (a shape), else its text."""
    if isinstance(value, list) and len(value) <= 8 and all(isinstance(n, int) and not isinstance(n, bool) for n in value):
        return value
    return wire.clean_text(str(value), 200)


class StaleHandleError(RuntimeError):
    """An object of a worker that has ended (it crashed, or a later check restarted it)."""


class Session:
    """The worker behind one sandbox subject, restarted per check after a death, and what it reported."""

    def __init__(self, settings: WorkerSettings, staging: str | None = None) -> None:
        self.settings = settings
        self.staging = staging  # a folder this session made and removes on close
        self.worker: WorkerProcess | None = None
        self.generation = 0
        self.check = LOAD_STEP
        self.latched: WorkerIncident | None = None
        self.restart_before_next_check = False
        self.events: list[dict[str, Any]] = []  # tripwire reports and incidents, each with its check
        self._kept: collections.Counter[str] = collections.Counter()  # events kept, by kind
        self.protections: dict[str, str] = {}
        self.scratch = ""  # the worker's scratch folder: the submission is at SCRATCH/submission
        self._proxies: weakref.WeakValueDictionary[int, RemoteObject] = weakref.WeakValueDictionary()
        self._released: list[int] = []
        self._reads: dict[tuple[int, str], Any] = {}
        # id -> (a weak reference to an array decoded from the worker, the worker's number for it): sent back with
        # that array, so the worker hands on its own array (wire.OriginOf).
        self._origins: dict[int, tuple[weakref.ref[Any], int]] = {}
        self._plan = ReadPlan()
        self._decoding: list[bytearray] = []  # the buffers of the reply being decoded

    # -- the worker ----------------------------------------------------------------------------------------------

    def _record(self, event: dict[str, Any]) -> None:
        kind = str(event.get("kind"))
        if kind != "incident" and self._kept[kind] >= MAX_EVENTS:
            return  # a worker that reports without end is out of tripwires to show, not out of memory
        self._kept[kind] += 1
        # Only the fields a report has (EVENT_FIELDS), cleaned; the check it is filed under is the trusted side's,
        # whatever the frame says (a worker frame naming its own check could misfile it or carry text).
        fields = {k: wire.clean_text(v, 500) if isinstance(v, str) else _plain_field(v)
                  for k, v in event.items() if k in EVENT_FIELDS}  # fmt: skip
        if "where" in fields:
            fields["where"] = _place(event["where"])
        self.events.append({**fields, "kind": kind, "check": self.check})

    def _worker_event(self, event: dict[str, Any], genuine: bool = True) -> None:
        """An event frame from the worker: a report of one of WORKER_EVENT_KINDS that the worker wrote
        (`genuine`: WorkerProcess checks its number), or else a forged frame."""
        if not genuine or event.get("kind") not in WORKER_EVENT_KINDS:
            kind = wire.clean_text(str(event.get("kind")), 100)
            by = "" if genuine else " that the worker did not write"
            event = {"kind": FORGED_EVENT, "detail": f"the worker's pipe carried an event of kind {kind}{by}"}
        self._record(event)

    def start(self) -> WorkerProcess:
        worker = WorkerProcess(self.settings, self._worker_event)
        try:
            worker.start()
        finally:
            self.protections = dict(worker.protections) or self.protections
            self.scratch = worker.scratch or self.scratch
        self.worker = worker
        self.scratch = worker.scratch
        self.generation += 1
        self._proxies = weakref.WeakValueDictionary()
        self._released = []
        self._reads = {}
        self._origins = {}
        self._plan.new_worker()
        return worker

    def set_call_timeout(self, seconds: float) -> None:
        """Each later call into the worker fails (and stops the worker) once it runs past `seconds`."""
        self.settings = dataclasses.replace(self.settings, call_timeout_s=seconds)
        if self.worker is not None:
            self.worker.settings = self.settings

    def begin_check(self, nodeid: str) -> None:
        self.check = nodeid
        self.latched = None
        if self.restart_before_next_check and self.worker is not None:
            self.worker.stop()
            self.worker = None
        self.restart_before_next_check = False

    def _live_worker(self) -> WorkerProcess:
        if self.latched is not None:  # the same kind, so the check fails as the first call did; said as not run
            raise WorkerIncident(self.latched.kind, f"not run: an earlier call stopped the worker ({self.latched})")
        if self.worker is None or not self.worker.running:
            try:
                self.start()
            except SandboxStartError as exc:
                self._incident(WorkerIncident("crashed", f"the worker could not be restarted: {exc}"))
        assert self.worker is not None
        return self.worker

    def _incident(self, incident: WorkerIncident) -> None:
        self._record({"kind": "incident", "incident": incident.kind, "detail": str(incident)})
        if self.worker is not None:
            self.worker.stop()
        self.worker = None
        self.latched = incident
        raise incident

    def close(self) -> None:
        if self.worker is not None:
            self.worker.stop()
            self.worker = None
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)
            self.staging = None

    # -- requests ------------------------------------------------------------------------------------------------

    def read(self, handle: int, name: str, what: str) -> Any:
        """An attribute of a worker object, remembered until the next request that may change state."""
        key = (handle, name)
        if key in self._reads:
            value = self._reads[key]
        else:
            value = self.request({"op": "getattr", "target": handle, "name": name}, [], what).result()
            self._reads[key] = value
        proxy = self._proxies.get(handle)
        if proxy is not None:
            self._plan.note_read(handle, object.__getattribute__(proxy, "_type"), name, value)
        return value

    def request(self, header: dict[str, Any], buffers: list[Any], what: str) -> Any:
        if header["op"] not in READ_ONLY_OPS:
            self._reads.clear()
            wanted = self._plan.prefetch(set(self._proxies.keys()))
            if wanted:
                header["prefetch"] = wanted
        worker = self._live_worker()
        read_ahead = self._plan.read_ahead_update()
        if read_ahead is not None:
            header["read_ahead"] = read_ahead
        if self._released:
            header["release"], self._released = self._released, []
        try:
            reply, reply_buffers = worker.request(header, buffers, what)
        except WorkerIncident as incident:
            self._incident(incident)
        try:
            for handle, name, node in reply.get("prefetched", []):
                if type(handle) is int and isinstance(name, str):
                    self._reads[(handle, name)] = self._decode(node, reply_buffers)
            changes = [(path, self._decode(node, reply_buffers)) for path, node in reply.get("writeback", [])]
            if "error" in reply:
                entry = reply["error"]
                if isinstance(entry, dict) and entry.get("type") == MEMORY_ERROR:
                    self.restart_before_next_check = True
                    self._incident(WorkerIncident("out-of-memory", f"{what} raised MemoryError in the worker: "
                                                                   f"{wire.clean_text(entry.get('message', ''), 300)}"))  # fmt: skip
                return _Failure(wire.error_from(entry), changes)
            return _Success(self._decode(reply.get("ok"), reply_buffers), changes)
        except (wire.ProtocolError, ValueError, TypeError) as exc:
            self._incident(WorkerIncident("protocol", f"{what}: the worker's reply broke the protocol ({exc})"))

    def _decode(self, node: Any, buffers: list[bytearray]) -> Any:
        outer, self._decoding = self._decoding, buffers
        try:
            return wire.from_wire(node, buffers, self._resolve, clean=True, on_array=self._note_origin)
        finally:
            self._decoding = outer

    def _note_origin(self, entry: dict[str, Any], array: Any) -> Any:
        """Keeps the worker's number for an array or named tuple it sent (wire.OriginOf): an array's by its id while
        it lives, a record's on the record itself, with this worker's generation. An array of a subclass with names
        of its own comes as a SandboxedArray that reads them on the worker's object (wire.own_names)."""
        names = wire.own_names(entry) if entry.get(wire.TAG) == "array" else None
        if names:
            array = sandboxed_array(array, self._resolve(entry["own"]), names)
        number = entry.get("origin")
        if type(number) is int and isinstance(array, wire.RecordOrigin):
            array._origin = (self.generation, number)
        elif type(number) is int:
            key = id(array)
            origins = self._origins

            def forget(ref: weakref.ref[Any]) -> None:
                if origins.get(key, (None,))[0] is ref:
                    del origins[key]

            try:
                origins[key] = (weakref.ref(array, forget), number)
            except TypeError:
                pass
        return array

    def _origin_of(self, array: Any) -> int | None:
        if isinstance(array, wire.RecordOrigin):
            generation, number = array._origin or (None, None)
            return number if generation == self.generation else None
        known = self._origins.get(id(array))
        return known[1] if known is not None and known[0]() is array else None

    def _resolve(self, entry: dict[str, Any]) -> RemoteObject:
        handle = int(entry["id"])
        proxy = self._proxies.get(handle)
        if proxy is None:
            methods = entry.get("methods", [])
            names = frozenset(str(n) for n in methods) if isinstance(methods, list) else frozenset()
            proxy = RemoteObject(self, self.generation, handle, wire.clean_text(entry.get("type", "object"), 100), names)
            self._proxies[handle] = proxy
        if proxy is not None and "reads" in entry:
            self._plan.note_new(handle, object.__getattribute__(proxy, "_type"))
        for item in entry.get("reads", []) if isinstance(entry.get("reads"), list) else []:
            if isinstance(item, list) and len(item) == 2 and isinstance(item[0], str):
                self._reads[(handle, item[0])] = self._decode(item[1], self._decoding)
        return proxy

    def handle_of(self, value: Any) -> Any:
        if isinstance(value, str):
            # A str subclass of the suite's own (NumPy's str_, say) was never the worker's: its text is what counts.
            return str(value)
        if isinstance(value, RemoteObject):
            session, generation, handle = object.__getattribute__(value, "_where")
            if session is not self or generation != self.generation:
                raise StaleHandleError(f"{value!r} belongs to a worker that has ended")
            return {wire.TAG: "handle", "id": handle}
        if _is_array(value):
            # An array of a subclass (a SandboxedArray among them) crosses as its values (wire.to_wire), as a
            # copy: the worker's own objects never run inside a call's watch in the place of the arrays it gets.
            return None
        raise TypeError(f"a {type(value).__name__} cannot be sent to the sandboxed subject")

    def released(self, generation: int, handle: int) -> None:
        if generation == self.generation:
            self._released.append(handle)

    def encode(self, value: Any, buffers: list[Any]) -> Any:
        return wire.to_wire(value, buffers, self.handle_of, origin_of=self._origin_of)

    def call(self, header: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any], what: str) -> Any:
        buffers: list[Any] = []
        header = {**header, "args": self.encode(list(args), buffers), "kwargs": self.encode(dict(kwargs), buffers)}
        outcome = self.request(header, buffers, what)
        _write_back({"args": list(args), "kwargs": kwargs}, outcome.changes)
        return outcome.result()


class ReadPlan:
    """Which attributes the worker should send unasked, learned from what the suite reads.

    - With every reply to a request that may change state: the plain values (scalars, short lists) read
      on each live object, and the arrays read on it since the previous such request (an MLX array is
      computed when it is converted, so only an array the suite keeps reading is worth sending).
    - With every new object of a type: the plain values read on objects of that type, and the arrays read
      on the previous object of that type.
    Sent values go into the same memo as answered reads, so they are exactly what a read would have
    returned right after the request; nothing else changes in the worker until the next request.
    """

    def __init__(self) -> None:
        self.plain: dict[int, set[str]] = {}  # handle -> plain attributes read on it
        self.arrays: set[tuple[int, str]] = set()  # arrays read since the last request that may change state
        self.type_plain: dict[str, set[str]] = {}
        self.type_arrays: dict[str, set[str]] = {}  # arrays read on the newest object of the type
        self.newest: dict[str, int] = {}
        self._sent: dict[str, list[str]] | None = None

    def new_worker(self) -> None:
        self.plain, self.arrays, self.newest, self._sent = {}, set(), {}, None

    def note_read(self, handle: int, type_name: str, name: str, value: Any) -> None:
        if _is_small(value):
            self.plain.setdefault(handle, set()).add(name)
            self.type_plain.setdefault(type_name, set()).add(name)
        elif _is_array(value) or hasattr(value, "shape"):
            self.arrays.add((handle, name))
            if self.newest.get(type_name) == handle:
                self.type_arrays.setdefault(type_name, set()).add(name)

    def note_new(self, handle: int, type_name: str) -> None:
        """A new object of the type arrived, with what was read ahead for it."""
        self.newest[type_name] = handle
        self.type_arrays[type_name] = set()

    def prefetch(self, live: set[int]) -> list[list[Any]]:
        self.plain = {handle: names for handle, names in self.plain.items() if handle in live}
        wanted: dict[int, set[str]] = {handle: set(names) for handle, names in self.plain.items()}
        for handle, name in self.arrays:
            if handle in live:
                wanted.setdefault(handle, set()).add(name)
        self.arrays = set()
        return [[handle, sorted(names)] for handle, names in sorted(wanted.items())]

    def read_ahead_update(self) -> dict[str, list[str]] | None:
        """The per-type lists for the worker, when they changed since they were last sent."""
        current = {kind: sorted(self.type_plain.get(kind, set()) | self.type_arrays.get(kind, set()))
                   for kind in set(self.type_plain) | set(self.type_arrays)}  # fmt: skip
        if current == self._sent:
            return None
        self._sent = current
        return current


def _is_small(value: Any, depth: int = 0) -> bool:
    """Data worth sending back unasked after each change: scalars, strings, short lists of them. (Not arrays:
    an MLX array is computed when it is converted, and the worker would pay for every one after every call.)"""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if type(value) in (list, tuple) and len(value) <= SMALL_VALUE_ITEMS and depth < 2:
        return all(_is_small(item, depth + 1) for item in value)
    return False


def _is_array(value: Any) -> bool:
    import sys

    numpy, mlx = sys.modules.get("numpy"), sys.modules.get("mlx.core")
    return (numpy is not None and isinstance(value, numpy.ndarray)) or (mlx is not None and isinstance(value, mlx.array))


SANDBOXED_OWN = "_pagecheck_sandboxed_own"  # a SandboxedArray's (handle, names), in its __dict__


@functools.lru_cache(maxsize=None)
def _sandboxed_array_type(base: type) -> type:
    """SandboxedArray over `base` (np.ndarray or mx.array)."""

    def __getattribute__(self: Any, name: str) -> Any:
        if not name.startswith("__"):
            own = object.__getattribute__(self, "__dict__").get(SANDBOXED_OWN)
            if own is not None and name in own[1]:
                return getattr(own[0], name)
        return base.__getattribute__(self, name)

    doc = ("An array from the worker of a subclass with attributes or methods of its own: its values here, and those "
           "names read on the worker's object (its handle), as they would answer in process. A view or a result made "
           "from it here holds no handle and reads as a plain array.")  # fmt: skip
    return type("SandboxedArray", (base,), {"__getattribute__": __getattribute__, "__doc__": doc,
                                            "__module__": __name__})  # fmt: skip


def sandboxed_array(array: Any, handle: RemoteObject, names: frozenset[str]) -> Any:
    """`array` (decoded from the worker, NumPy or MLX) as a SandboxedArray that reads `names` on `handle`."""
    import numpy as np

    if isinstance(array, np.ndarray):
        wrapped = array.view(_sandboxed_array_type(np.ndarray))
    else:
        import mlx.core as mx

        wrapped = _sandboxed_array_type(mx.array)(array)
    object.__getattribute__(wrapped, "__dict__")[SANDBOXED_OWN] = (handle, names)
    return wrapped


class _Success:
    def __init__(self, value: Any, changes: list[tuple[list[Any], Any]]) -> None:
        self.value, self.changes = value, changes

    def result(self) -> Any:
        return self.value


class _Failure:
    def __init__(self, error: BaseException, changes: list[tuple[list[Any], Any]]) -> None:
        self.error, self.changes = error, changes

    def result(self) -> Any:
        raise self.error


def _write_back(arguments: dict[str, Any], changes: list[tuple[list[Any], Any]]) -> None:
    """Change the caller's arrays as the worker's call changed its copies."""
    for path, value in changes:
        target: Any = arguments
        try:
            for key in path:
                target = target[key]
        except (KeyError, IndexError, TypeError):
            raise wire.ProtocolError(f"write-back names no argument at {path!r}") from None
        if tuple(target.shape) != tuple(value.shape) or wire.dtype_name(target) != wire.dtype_name(value):
            raise wire.SubjectError(
                f"the call changed the shape or dtype of its argument {'/'.join(map(str, path[1:]))} in place"
            )
        target[...] = value


class RemoteObject:
    """An object that lives in the worker. Attribute access, calls and common operators are forwarded."""

    __slots__ = ("_where", "_type", "_methods", "__weakref__")

    def __init__(self, session: Session, generation: int, handle: int, type_name: str,
                 methods: frozenset[str] = frozenset()) -> None:  # fmt: skip
        object.__setattr__(self, "_where", (session, generation, handle))
        object.__setattr__(self, "_type", type_name)
        object.__setattr__(self, "_methods", methods)  # plain methods of its class: called without a read first
        weakref.finalize(self, session.released, generation, handle)

    def _send(self, op: str, what: str, **fields: Any) -> Any:
        session, generation, handle = object.__getattribute__(self, "_where")
        if generation != session.generation:
            raise StaleHandleError(f"this {object.__getattribute__(self, '_type')} belongs to a worker that has ended")
        buffers: list[Any] = []
        encoded = {k: session.encode(v, buffers) for k, v in fields.items()}
        return session.request({"op": op, "target": handle, **encoded}, buffers, what).result()

    def _what(self, member: str) -> str:
        return f"{object.__getattribute__(self, '_type')}.{member}"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        if name in object.__getattribute__(self, "_methods"):
            return RemoteMethod(self, name)
        session, generation, handle = object.__getattribute__(self, "_where")
        if generation != session.generation:
            raise StaleHandleError(f"this {object.__getattribute__(self, '_type')} belongs to a worker that has ended")
        return session.read(handle, name, f"reading {self._what(name)}")

    def __setattr__(self, name: str, value: Any) -> None:
        self._send("setattr", f"setting {self._what(name)}", name=name, value=value)

    def _pagecheck_fail_call(self, name: str, at: int, message: str) -> Any:
        """The worker's failing wrapper around this object's `name` (injection.install_failing_call): a proxy whose
        `calls` counts them."""
        return self._send("fail_call", f"injecting a failure into {self._what(name)}", name=name, at=at, message=message)

    def _pagecheck_result_identity(self, name: str) -> Any:
        """A probe in the worker that calls this object's `name` once now and, on `same()`, again: whether it
        returned the first call's object (injection.ResultIdentity)."""
        return self._send("result_identity", f"calling {self._what(name)}", name=name)

    def _pagecheck_watch_materialize(self) -> dict[str, Any]:
        """What this cache's materialize() did with gather_dense and mx.eval, watched in the worker
        (injection.watch_materialize)."""
        return self._send("watch_materialize", f"watching {self._what('materialize')}", name="materialize")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        session, generation, handle = object.__getattribute__(self, "_where")
        if generation != session.generation:
            raise StaleHandleError(f"this {object.__getattribute__(self, '_type')} belongs to a worker that has ended")
        return session.call({"op": "call", "target": handle}, args, kwargs, f"calling {self._what('__call__')}")

    def _special(self, name: str, *args: Any) -> Any:
        return self._send("special", f"{self._what(name)}", name=name, args=list(args))

    def __len__(self) -> int:
        return int(self._special("__len__"))

    def __bool__(self) -> bool:
        return bool(self._special("__bool__"))

    def __iter__(self) -> Any:
        return iter(self._special("__iter__"))

    def __getitem__(self, key: Any) -> Any:
        return self._special("__getitem__", key)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._special("__setitem__", key, value)

    def __contains__(self, item: Any) -> bool:
        return bool(self._special("__contains__", item))

    def __index__(self) -> int:
        return int(self._special("__index__"))

    def __int__(self) -> int:
        return int(self._special("__int__"))

    def __float__(self) -> float:
        return float(self._special("__float__"))

    def _pagecheck_equals(self, other: Any) -> Any:
        """`self == other` as the object in the worker answers it, whatever `other` is (calls.equals_list: the
        course's asserts compare a cache's page_ids with a list). __eq__ answers only between two handles, so
        that an object there cannot claim to equal the suite's own values elsewhere."""
        return self._special("__eq__", other)

    def __eq__(self, other: Any) -> bool:
        if other is self:
            return True
        return bool(self._special("__eq__", other)) if isinstance(other, RemoteObject) else False

    def __hash__(self) -> int:
        return hash(object.__getattribute__(self, "_where")[1:])

    def __repr__(self) -> str:
        try:
            return f"<sandboxed {self._special('__repr__')}>"
        except Exception:
            return f"<sandboxed {object.__getattribute__(self, '_type')} (unavailable)>"


class RemoteMethod:
    """A method of a RemoteObject, called in the worker in one request."""

    __slots__ = ("owner", "name")

    def __init__(self, owner: RemoteObject, name: str) -> None:
        self.owner, self.name = owner, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        session, generation, handle = object.__getattribute__(self.owner, "_where")
        if generation != session.generation:
            raise StaleHandleError(f"{self.name} belongs to a worker that has ended")
        what = f"calling {self.owner._what(self.name)}"
        return session.call({"op": "call_method", "target": handle, "name": self.name}, args, kwargs, what)

    def __repr__(self) -> str:
        return f"<sandboxed method {self.owner._what(self.name)}>"


class RemoteApi:
    """One of the subject's API names: calling it calls (or constructs) it in the worker."""

    def __init__(self, session: Session, name: str, kind: str, shown: str | None = None) -> None:
        self.session = session
        self.__name__ = name
        self.kind = kind
        self.shown = shown  # how the object prints in the worker, as failure messages show it in process

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.session.call({"op": "call_api", "name": self.__name__}, args, kwargs, f"calling {self.__name__}")

    def __repr__(self) -> str:
        return self.shown or f"<sandboxed {self.kind} {self.__name__}>"


# -- loading -----------------------------------------------------------------------------------------------------

_configured: WorkerSettings | None = None
_sessions: list[Session] = []


def configure(settings: WorkerSettings | None) -> None:
    """Grading: the next sandbox subject loads these settings (the staged submission) instead of its spec."""
    global _configured
    _configured = settings


def active_session() -> Session | None:
    return _sessions[-1] if _sessions else None


def close_sessions() -> None:
    while _sessions:
        _sessions.pop().close()


def _own_subject_settings(inner: str) -> WorkerSettings:
    roots = sorted({str(Path(root).parent) for root in harness_roots()})
    return WorkerSettings(spec=inner, import_paths=tuple(roots), strict=False, extra_read_paths=tuple(roots))


def _standalone_settings(inner: str) -> tuple[WorkerSettings, str | None]:
    """The worker settings of `sandbox:SPEC` outside grading: a built-in subject as it is, anything else staged
    as grading stages a submission (stage_copy: no links followed, the same limits) into a temporary folder,
    compiled files included since nothing is built here."""
    if inner in BUILT_IN_SUBJECTS:
        return _own_subject_settings(inner), None
    submission = _standalone_submission(inner)
    staging = tempfile.mkdtemp(prefix="pagecheck-stage-")
    try:
        stage_copy(submission, Path(staging) / "staged", keep_compiled=True)
    except (SubmissionFilesError, OSError) as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise SubjectError(f"subject spec={SANDBOX_PREFIX + inner!r}: {exc}") from None
    spec = submission.spec_in(f"{SCRATCH_PLACEHOLDER}/{SUBMISSION_DIR}")
    return WorkerSettings(spec=spec, copy_in=str(Path(staging) / "staged")), staging


def _standalone_submission(inner: str) -> Submission:
    if inner.startswith(TINY_LLM_PREFIX):
        path, kind = resolved(SANDBOX_PREFIX + inner, inner[len(TINY_LLM_PREFIX) :]), "tiny-llm"
        if not (path / "src").is_dir():
            raise SubjectError(f"subject spec={SANDBOX_PREFIX + inner!r}: {path / 'src'} is not a folder")
    elif inner.endswith(".py"):
        path, kind = resolved(SANDBOX_PREFIX + inner, inner), "file"
        if not path.is_file():
            raise SubjectError(f"subject spec={SANDBOX_PREFIX + inner!r}: {path} is not a file")
    elif (Path(inner).expanduser() / "__init__.py").is_file():
        path, kind = resolved(SANDBOX_PREFIX + inner, inner), "package"
    else:
        raise SubjectError(f"subject spec={SANDBOX_PREFIX + inner!r}: inside the sandbox give a .py file, a "
                           f"package folder, tiny-llm:PATH, or one of {BUILT_IN_SUBJECTS}")  # fmt: skip
    return Submission(name=path.name, path=path, kind=kind)


def load_sandbox_subject(spec: str) -> Subject:
    """The Subject for `sandbox:SPEC`, its worker started and its names known; SubjectError if it does not load."""
    inner = spec[len(SANDBOX_PREFIX) :] if spec.startswith(SANDBOX_PREFIX) else spec
    staging = None
    if _configured is not None:
        settings = _configured
    else:
        settings, staging = _standalone_settings(inner)
    session = Session(settings, staging)
    if not _sessions:
        atexit.register(close_sessions)  # without the grading plugin nothing else ends the workers and their folders
    _sessions.append(session)  # a session that failed keeps what the worker reported while it loaded
    try:
        worker = session.start()
    except SandboxStartError as exc:
        session.close()
        raise SubjectError(f"subject spec={spec!r}: {exc}") from None
    names = {name: RemoteApi(session, name, kind, worker.shown.get(name))
             for name, kind in worker.names.items() if name in API_NAMES}  # fmt: skip
    missing = {name: why for name, why in worker.missing.items() if name in API_NAMES}
    return Subject(spec=spec, origin=f"sandboxed worker: {worker.origin}", names=names, missing=missing,
                   fail_on_call=RemoteObject._pagecheck_fail_call,
                   watch_materialize=RemoteObject._pagecheck_watch_materialize,
                   result_identity=RemoteObject._pagecheck_result_identity,
                   begin_check=session.begin_check, call_time_limit=session.set_call_timeout)


# The suite resolves sandbox: specs through this module once it is imported (the grading plugin imports it).
register_prefix_loader(SANDBOX_PREFIX, load_sandbox_subject)
