"""The worker: hosts a student's subject and answers the trusted suite's requests over a pipe.

This is the only pagecheck code that runs next to student code, and it is not
imported: the worker's bootstrap (BOOTSTRAP, run with `python -I -S -c`)
reads one length-prefixed JSON message holding the sources of wire.py,
subject.py, injection.py, tripwires.py, seccomp.py and this file, runs them
as private modules, and calls main(). Module level imports the standard library only.

main() first installs an audit hook, which Python code cannot remove, that
refuses
    - importing pagecheck (REFUSED_PACKAGES),
    - opening any path under the harness's folders,
    - the gc calls that reach every object (get_objects, get_referrers,
      get_referents), and
    - importing mlx or numpy again once they are loaded (a fresh import of a
      native module could bring back the real SDPA).
Each refusal is reported to the trusted side as an event. Then it loads MLX,
arms the tripwires (tripwires.py), installs a seccomp filter that refuses
new processes and programs (seccomp.py), loads the subject and answers
requests until the pipe closes.
"""

from __future__ import annotations

import collections
import json
import os
import struct
import sys
import types
import weakref
from typing import Any

REFUSED_PACKAGES = frozenset({"pagecheck"})
REFUSED_EVENTS = frozenset({"gc.get_objects", "gc.get_referrers", "gc.get_referents"})
# The worker's own modules are named this (BOOTSTRAP); they leave sys.modules before the subject loads.
SANDBOX_PREFIX = "_sandbox_"
GUARDED_MODULES = ("numpy", "mlx", "mlx.core")
ATTENTION = "paged_attention"
ATTENTION_ARGUMENTS = ("query", "key_pages", "value_pages", "block_table", "context_lens", "page_size")
PREFETCH_BYTES = 1 << 20  # array bytes sent unasked with one reply
SCRATCH_PLACEHOLDER = "{scratch}"  # the same placeholder as launcher.py's (this module may not import it)
SENT_RECORDS = 256  # named tuples and int subclasses kept to be handed back as themselves (Worker.sent_records)
PLAIN_ITEMS = (str, int, float, bool, bytes, type(None))  # compared by value in a record that comes back

# Run by `python -I -S -c BOOTSTRAP FD_IN FD_OUT`: one u64 length, then the JSON message.
BOOTSTRAP = """
import json, os, struct, sys, types
fd_in, fd_out = int(sys.argv[1]), int(sys.argv[2])
def read(n):
    data = b""
    while len(data) < n:
        chunk = os.read(fd_in, n - len(data))
        if not chunk:
            sys.exit(3)
        data += chunk
    return data
message = json.loads(read(struct.unpack("<Q", read(8))[0]))
modules = {}
for name, source in message["modules"]:
    module = types.ModuleType("_sandbox_" + name)
    module.__file__ = "<sandbox:" + name + ">"
    sys.modules[module.__name__] = module
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    modules[name] = module
modules["worker_main"].main(modules, message["config"], fd_in, fd_out)
"""
BOOTSTRAP_LENGTH = struct.Struct("<Q")


def bootstrap_message(sources: list[tuple[str, str]], config: dict[str, Any]) -> bytes:
    """What the trusted side writes first: the modules to run (in order) and the worker's settings."""
    body = json.dumps({"modules": sources, "config": config}).encode("utf-8")
    return BOOTSTRAP_LENGTH.pack(len(body)) + body


class Worker:
    def __init__(self, wire: types.ModuleType, fd_in: int, fd_out: int) -> None:
        self.wire = wire
        # Every frame goes out through this writer, made before the subject loads: code the submission runs can
        # rebind the wire module's names, os.write or json's, and still neither drop nor rewrite a frame.
        self.write_frame = wire.frame_writer(fd_out, checked=True)
        self.reader = wire.FrameReader(fd_in)
        self.objects: dict[int, Any] = {}
        self.ids_by_object: dict[int, int] = {}
        self.methods_by_type: dict[type, list[str]] = {}
        self.wanted: Any = None  # the request's "prefetch" list
        self.read_ahead: dict[str, Any] = {}  # type name -> attributes to send with each new handle of that type
        self.reading_ahead = False
        self.reply_buffers: list[Any] = []  # the buffers of the reply being built
        self.decoding: list[Any] = []  # the buffers of the request being decoded
        self.next_id = 1
        # The arrays sent to the trusted side, by number (wire.OriginOf), while they live: one that comes back as an
        # argument holding the same values is handed on itself, as the caller in process would pass the object it
        # read (an attention that changes it in place changes it where the subject's later reads see it).
        self.sent_arrays: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        # The named tuples and int subclasses sent, the latest SENT_RECORDS of them (neither takes a weak
        # reference): a mask record or an IntEnum's member a cache handed out comes back to its attention as itself,
        # which may know it by its type.
        self.sent_records: collections.OrderedDict[int, tuple[Any, ...]] = collections.OrderedDict()
        self.next_array = 1
        self.api: dict[str, Any] = {}
        self.tripwires: Any = None
        self.injection: Any = None  # invariants/injection.py: what a check puts in place of a subject's method

    # -- events --------------------------------------------------------------------------------------------------

    def report(self, event: dict[str, Any]) -> None:
        self.write_frame({"event": event})

    # -- handles -------------------------------------------------------------------------------------------------

    def handle_of(self, value: Any) -> dict[str, Any] | None:
        if type(value) is getattr(self.tripwires, "_watched_ndarray", None):
            # The gather watch's own ndarray subclass (an output the subject made with np.zeros during a call):
            # its names answer as ndarray's do, so it crosses as its values alone (wire.to_wire's "own").
            return None
        key = id(value)
        handle = self.ids_by_object.get(key)
        if handle is None or self.objects.get(handle) is not value:
            handle = self.next_id
            self.next_id += 1
            self.objects[handle] = value
            self.ids_by_object[key] = handle
            new = True
        else:
            new = False
        kind = type(value).__name__[:100]
        entry: dict[str, Any] = {self.wire.TAG: "handle", "id": handle, "type": kind, "callable": callable(value)}
        methods = self._methods_of(type(value))
        if methods and not any(name in getattr(value, "__dict__", {}) for name in methods):
            entry["methods"] = methods
        read_ahead = self.read_ahead.get(kind)
        if new and read_ahead and not self.reading_ahead:
            entry["reads"] = self._read_ahead(value, read_ahead)
        return entry

    def _read_ahead(self, value: Any, names: Any) -> list[Any]:
        """Attributes the trusted side read on earlier objects of this type, read now and sent with the handle
        (arrays into the reply's buffers); an attribute whose read raises, or that is an object, is left out."""
        found = []
        self.reading_ahead = True
        try:
            for name in names if isinstance(names, list) else []:
                own: list[Any] = []
                try:
                    node = self.wire.to_wire(getattr(value, str(name)), own, self._no_handle, origin_of=self.origin_of)
                except Exception:
                    continue
                found.append([str(name), self._shift_buffers(node, len(self.reply_buffers))])
                self.reply_buffers.extend(own)
        finally:
            self.reading_ahead = False
        return found

    def _methods_of(self, cls: type) -> list[str]:
        """Names that are plain methods of the class, so the trusted side may call them without reading them
        first; none for classes that compute their attributes."""
        known = self.methods_by_type.get(cls)
        if known is not None:
            return known
        names: list[str] = []
        if cls.__getattribute__ is object.__getattribute__ and not hasattr(cls, "__getattr__"):
            seen: set[str] = set()
            for klass in cls.__mro__:
                for name, member in vars(klass).items():
                    if name in seen or name.startswith("__"):
                        continue
                    seen.add(name)
                    if isinstance(member, (types.FunctionType, staticmethod, classmethod)):
                        names.append(name)
        self.methods_by_type[cls] = names = sorted(names)
        return names

    def origin_of(self, value: Any) -> int | None:
        number = self.next_array
        if isinstance(value, (tuple, int)):  # a named tuple or an int subclass (wire.to_wire asks for no other)
            self.sent_records[number] = value
            while len(self.sent_records) > SENT_RECORDS:
                self.sent_records.popitem(last=False)
        else:
            try:
                self.sent_arrays[number] = value
            except TypeError:  # an array type without weak references goes out as a value only
                return None
        self.next_array += 1
        return number

    def original(self, entry: dict[str, Any], array: Any) -> Any:
        """The array this worker sent as `entry`'s origin, where it is of the very type of `array`, the copy decoded
        from it (a plain mx.array or np.ndarray: a subclass's methods are the submission's code, which would then run
        inside the call's watch, answering its questions), and still holds what `entry` carries (library, dtype,
        shape and bytes); else that copy."""
        number = entry.get("origin")
        if entry.get(self.wire.TAG) == "tuple":
            return self._original_record(number, array)
        if entry.get(self.wire.TAG) == "int":
            sent = self.sent_records.get(number) if type(number) is int else None
            return sent if isinstance(sent, int) and int.__eq__(sent, int(array)) is True else int(array)
        sent = self.sent_arrays.get(number) if type(number) is int else None
        if sent is None or type(sent) is not type(array):
            return array
        try:
            again: list[Any] = []
            now = self.wire.array_entry(sent, again)
            same = all(now[k] == entry.get(k) for k in ("lib", "dtype", "shape")) and bytes(again[0]) == bytes(
                self.decoding[entry["buf"]])
        except Exception:
            return array
        return sent if same else array

    def _original_record(self, number: Any, record: tuple[Any, ...]) -> Any:
        """The named tuple this worker sent as `number`, where `record` (decoded from what came back, its arrays
        already their originals where unchanged) holds the same fields and items: each item the very object, or an
        equal plain value; else `record`."""
        sent = self.sent_records.get(number) if type(number) is int else None
        if sent is None or list(getattr(type(sent), "_fields", ())) != list(record._fields) or len(sent) != len(record):
            return record
        return sent if all(_same_item(a, b) for a, b in zip(sent, record)) else record

    def resolve(self, entry: dict[str, Any]) -> Any:
        handle = entry["id"]
        if handle not in self.objects:
            raise self.wire.ProtocolError(f"handle {handle} is not held by this worker")
        return self.objects[handle]

    def release(self, ids: list[Any]) -> None:
        for handle in ids:
            value = self.objects.pop(handle, None) if type(handle) is int else None
            if value is not None and self.ids_by_object.get(id(value)) == handle:
                del self.ids_by_object[id(value)]

    # -- replies -------------------------------------------------------------------------------------------------

    def send(self, header: dict[str, Any], value: Any = None, with_value: bool = False) -> None:
        buffers: list[Any] = []
        self.reply_buffers = buffers
        if self.wanted:
            header = {**header, "prefetched": self.prefetch(self.wanted, buffers)}
        if with_value:
            try:
                header = {**header, "ok": self.wire.to_wire(value, buffers, self.handle_of, origin_of=self.origin_of)}
            except Exception as exc:
                buffers = []
                header = {"error": self.wire.error_entry(exc)}
        self.write_frame(header, buffers)
        self.reply_buffers = []

    # -- calls ---------------------------------------------------------------------------------------------------

    def _snapshots(self, value: Any, path: list[Any], found: list[tuple[list[Any], Any, Any]]) -> None:
        import numpy as np

        mx = sys.modules.get("mlx.core")
        if isinstance(value, np.ndarray):
            found.append((path, value, value.copy()))
        elif mx is not None and isinstance(value, mx.array):
            # The bytes, copied: a NumPy view of the array (np.asarray) writes into the buffer it shares.
            found.append((path, value, (tuple(value.shape), str(value.dtype), bytes(memoryview(value)))))
        elif isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                self._snapshots(item, [*path, index], found)
        elif type(value) is dict:
            for key, item in value.items():
                if isinstance(key, (str, int)):
                    self._snapshots(item, [*path, key], found)

    def _changed(self, now: Any, before: Any) -> bool:
        import numpy as np

        if isinstance(now, np.ndarray):
            if now.shape != before.shape or now.dtype != before.dtype:
                return True
            return not np.array_equal(now, before, equal_nan=now.dtype.kind in "fc")
        shape, dtype, data = before
        return tuple(now.shape) != shape or str(now.dtype) != dtype or bytes(memoryview(now)) != data

    def _writeback(self, snapshots: list[tuple[list[Any], Any, Any]], buffers: list[Any]) -> list[Any]:
        changed = []
        for path, now, before in snapshots:
            if self._changed(now, before):
                changed.append([path, self.wire.to_wire(now, buffers, self.handle_of)])
        return changed

    def call(self, function: Any, args: list[Any], kwargs: dict[str, Any], is_attention: bool) -> None:
        snapshots: list[tuple[list[Any], Any, Any]] = []
        self._snapshots(args, ["args"], snapshots)
        self._snapshots(kwargs, ["kwargs"], snapshots)
        if is_attention:
            bound = dict(zip(ATTENTION_ARGUMENTS, args)) | kwargs
            self.tripwires.begin_call(bound.get("key_pages"), bound.get("value_pages"), bound.get("context_lens"))
        try:
            result = function(*args, **kwargs)
            error = None
        except BaseException as exc:  # SystemExit and KeyboardInterrupt from subject code are errors too
            result, error = None, exc
        finally:
            self.tripwires.end_call()
        buffers: list[Any] = []
        self.reply_buffers = buffers
        try:
            header: dict[str, Any] = {"writeback": self._writeback(snapshots, buffers)}
            if self.wanted:
                header["prefetched"] = self.prefetch(self.wanted, buffers)
            if error is None:
                # The attention's output crosses as its values alone, whatever its array class defines: a method of
                # its own read after the call (an astype) would run the submission's code outside the call's watch.
                handle_of = self._values_alone if is_attention else self.handle_of
                header["ok"] = self.wire.to_wire(result, buffers, handle_of, origin_of=self.origin_of)
            else:
                header["error"] = self.wire.error_entry(error)
        except Exception as exc:
            buffers, header = [], {"error": self.wire.error_entry(exc)}
        self.write_frame(header, buffers)
        self.reply_buffers = []

    def _values_alone(self, value: Any) -> dict[str, Any] | None:
        """handle_of for an attention's output: None (values alone) for an array, a handle for anything else."""
        import numpy as np

        mx = sys.modules.get("mlx.core")
        if isinstance(value, np.ndarray) or (mx is not None and isinstance(value, mx.array)):
            return None
        return self.handle_of(value)

    def special(self, target: Any, name: str, args: list[Any]) -> Any:
        import operator

        if name == "__iter__":
            return list(iter(target))
        if name == "__bool__":
            return bool(target)
        if name == "__len__":
            return len(target)
        if name in ("__repr__", "__str__"):
            return self.wire.clean_text(repr(target) if name == "__repr__" else str(target))
        if name in ("__int__", "__index__", "__float__"):
            return {"__int__": int, "__index__": operator.index, "__float__": float}[name](target)
        if name in ("__getitem__", "__setitem__", "__contains__", "__eq__"):
            function = {"__getitem__": operator.getitem, "__setitem__": operator.setitem,
                        "__contains__": operator.contains, "__eq__": operator.eq}[name]  # fmt: skip
            return function(target, *args)
        raise AttributeError(f"{name} is not forwarded to the worker")

    def prefetch(self, wanted: Any, buffers: list[Any]) -> list[Any]:
        """Current values of the attributes the trusted side asked to have sent with this reply: plain values
        and arrays (their bytes appended to the reply's `buffers`, PREFETCH_BYTES in all), no handles; an
        attribute whose read raises, or that does not fit, is left out."""
        found = []
        room = PREFETCH_BYTES
        for item in wanted if isinstance(wanted, list) else []:
            if not (isinstance(item, list) and len(item) == 2 and item[0] in self.objects):
                continue
            target = self.objects[item[0]]
            for name in item[1] if isinstance(item[1], list) else []:
                own: list[Any] = []
                try:
                    node = self.wire.to_wire(getattr(target, str(name)), own, self._no_handle, origin_of=self.origin_of)
                except Exception:
                    continue
                size = sum(memoryview(b).nbytes for b in own)
                if size > room:
                    continue
                room -= size
                node = self._shift_buffers(node, len(buffers))
                buffers.extend(own)
                found.append([item[0], name, node])
        return found

    def _shift_buffers(self, node: Any, offset: int) -> Any:
        """`node` with its buffer indexes moved by `offset` (its buffers go after those already in the reply)."""
        if not offset:
            return node
        if isinstance(node, list):
            return [self._shift_buffers(item, offset) for item in node]
        if isinstance(node, dict):
            moved = {k: self._shift_buffers(v, offset) for k, v in node.items()}
            if "buf" in node and node.get(self.wire.TAG) in ("array", "bytes", "npscalar"):
                moved["buf"] = node["buf"] + offset
            return moved
        return node

    def _no_handle(self, value: Any) -> dict[str, Any]:
        raise TypeError("not plain data")

    def serve_one(self, header: dict[str, Any], buffers: list[Any]) -> None:
        wire = self.wire
        self.release(header.get("release", []))
        self.wanted = header.get("prefetch")
        if isinstance(header.get("read_ahead"), dict):
            self.read_ahead = header["read_ahead"]
        op = header.get("op")
        self.decoding = buffers
        decode = lambda node: wire.from_wire(  # noqa: E731
            node, buffers, self.resolve, clean=False, on_array=self.original
        )
        if op == "release":
            self.send({"ok": None})
            return
        try:
            if op in ("call", "call_api", "call_method"):
                if op == "call_api":
                    name = header.get("name")
                    if name not in self.api:
                        raise AttributeError(f"the subject has no {name!r}")
                    target = self.api[name]
                elif op == "call_method":
                    target = getattr(self.resolve({"id": header.get("target")}), str(header.get("name")))
                else:
                    target = self.resolve({"id": header.get("target")})
                args, kwargs = decode(header.get("args", [])), decode(header.get("kwargs", {wire.TAG: "dict", "items": []}))
                if not isinstance(args, list) or not isinstance(kwargs, dict):
                    raise wire.ProtocolError("call arguments are not a list and a dict")
                self.call(target, args, kwargs, op == "call_api" and header.get("name") == ATTENTION)
                return
            target = self.resolve({"id": header.get("target")})
            name = str(header.get("name"))
            if op == "getattr":
                value = getattr(target, name)
            elif op == "setattr":
                setattr(target, name, decode(header.get("value")))
                value = None
            elif op == "special":
                value = self.special(target, name, decode(header.get("args", [])))
            elif op == "fail_call":
                value = self.injection.install_failing_call(target, name, int(header.get("at", 0)),
                                                            str(header.get("message", ""))[:500])  # fmt: skip
            elif op == "result_identity":
                value = self.injection.ResultIdentity(target, name)
            elif op == "watch_materialize":
                value = self.injection.watch_materialize(target, sys.modules["mlx.core"])
            else:
                raise wire.ProtocolError(f"unknown request {op!r}")
        except wire.ProtocolError:
            raise
        except BaseException as exc:
            self.send({"error": wire.error_entry(exc)})
            return
        self.send({}, value, with_value=True)

    def serve(self) -> None:
        while True:
            try:
                header, buffers = self.reader.read()
            except self.wire.ProtocolError:
                return  # the trusted side closed the pipe: the sandbox ends with this process
            self.serve_one(header, buffers)


def _same_item(sent: Any, back: Any) -> bool:
    """Whether an item of a named tuple that came back stands for the one sent: the very object (an array handed
    back as itself, a handle), an equal value of the same plain type, or a plain list or tuple of such items. Only
    builtin types are compared: a submission's own __eq__ would run here."""
    if sent is back:
        return True
    kind = type(sent)
    if kind is not type(back):
        return False
    if kind in PLAIN_ITEMS:
        return sent == back or (kind is float and sent != sent and back != back)  # NaN stands for NaN
    if kind in (list, tuple):
        return len(sent) == len(back) and all(_same_item(a, b) for a, b in zip(sent, back))
    return False


def _student_frame() -> str:
    """'file:line' of the innermost frame that is not the worker's, the import machinery's or the standard
    library's: where the submission asked for what was refused."""
    frame = sys._getframe(2)
    stdlib = os.path.dirname(os.__file__)
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith("<") or name.startswith(stdlib)):
            return f"{name}:{frame.f_lineno}"
        frame = frame.f_back
    return ""


def _install_audit_hook(worker: Worker, config: dict[str, Any]) -> dict[str, bool]:
    """The refusals in the module docstring; returns the switch that arms the re-import guard."""
    refused = frozenset(config.get("refused_packages", REFUSED_PACKAGES))
    roots = tuple(os.path.join(os.path.realpath(root), "") for root in config.get("harness_roots", []))
    guarded = frozenset(GUARDED_MODULES)
    state = {"armed": False, "reporting": False}
    realpath, fsdecode = os.path.realpath, os.fsdecode

    def refuse(kind: str, detail: str, error: BaseException) -> None:
        if not state["reporting"]:
            state["reporting"] = True
            try:
                worker.report({"kind": kind, "detail": detail[:300], "where": _student_frame()})
            finally:
                state["reporting"] = False
        raise error

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "import":
            name = args[0] if args and isinstance(args[0], str) else ""
            if name.partition(".")[0] in refused:
                refuse("harness_import", f"import {name}",
                       ImportError(f"importing {name} is refused while grading: it is pagecheck's own code"))  # fmt: skip
            if state["armed"] and name in guarded:
                refuse("reimport", f"import {name} again",
                       ImportError(f"importing {name} again is refused while grading"))  # fmt: skip
        elif event == "open" and roots and args and isinstance(args[0], (str, bytes)):
            path = realpath(fsdecode(args[0]))
            if any((path + os.sep).startswith(root) for root in roots):
                refuse("harness_read", f"open {path}", PermissionError(f"{path} is pagecheck's own code"))
        elif event in REFUSED_EVENTS:
            refuse("introspection", event, RuntimeError(f"{event} is refused while grading"))

    sys.addaudithook(hook)

    class RefuseHarness:
        """First on sys.meta_path: importlib.import_module raises no "import" audit event, so the same names
        are refused here too (a submission can take this finder away, not the hook)."""

        @staticmethod
        def find_spec(name: str, path: Any = None, target: Any = None) -> None:
            if name.partition(".")[0] in refused:
                refuse("harness_import", f"import {name}",
                       ImportError(f"importing {name} is refused while grading: it is pagecheck's own code"))  # fmt: skip
            if state["armed"] and name in guarded:  # asked for only when it was taken out of sys.modules
                refuse("reimport", f"import {name} again",
                       ImportError(f"importing {name} again is refused while grading"))  # fmt: skip

    sys.meta_path.insert(0, RefuseHarness())
    return state


def main(modules: dict[str, types.ModuleType], config: dict[str, Any], fd_in: int, fd_out: int) -> None:
    worker = Worker(modules["wire"], fd_in, fd_out)
    worker.injection = modules["injection"]
    strict = config.get("strict", True)
    guard = _install_audit_hook(worker, config) if strict else {"armed": False}
    os.environ.setdefault("MLX_ENABLE_TF32", "0")
    if strict:
        # The folders alone: their .pth files are not run, so nothing they would import or hook is.
        sys.path.extend(path for path in config.get("site_paths", []) if path not in sys.path)
    else:
        # Relaxed (the harness's own subjects): .pth files run, so an editable pagecheck resolves its layers.
        import site

        for path in config.get("site_paths", []):
            site.addsitedir(path)
    import mlx.core as mx
    import numpy as np

    if config.get("device") == "gpu":
        # Never a quiet fallback to the CPU: the trusted suite would skip every GPU check, and every
        # submission would be graded on nothing.
        if not mx.is_available(mx.gpu):
            raise RuntimeError("device='gpu' was asked for, but MLX reports no GPU inside the sandboxed worker")
        mx.set_default_device(mx.gpu)
    else:  # MLX built with a GPU back-end starts on the GPU: the CPU is asked for by name
        mx.set_default_device(mx.cpu)
    worker.tripwires = modules["tripwires"].Tripwires(worker.report)
    worker.tripwires.install_sdpa_trap(mx.fast)
    worker.tripwires.install_gather_watch(mx, np)
    guard["armed"] = True
    # From here on nothing in the worker starts a process or a program (seccomp.py): a fresh interpreter would
    # hold none of the traps above, nor this process's memory limit.
    # Said now, before any code of the submission runs: that code can rewrite what the worker sends later.
    # What workers share stays allowed where MLX's CUDA back-end is loaded (on the GPU, or on any device where MLX
    # has it), whose driver may lock its caches and share memory with its own threads; a submission's passes run
    # one after the other, and there `grade` one submission at a time.
    # The protocol's pipes stay under their numbers: a submission that puts a pipe of its own under the reply
    # descriptor's number (dup2) would receive every report written while it is there.
    refuse_shared = not config.get("loads_cuda", config.get("device") == "gpu")
    filtered = modules["seccomp"].refuse_new_processes(refuse_shared, keep_fds=(fd_in, fd_out))
    worker.send({"op": "armed", "new_processes": filtered})
    # The worker's modules leave sys.modules before the submission's code runs: a name there is one line away
    # from rebinding the wire or the watch's classes (tried with the wire's write_frame). The traps' wrappers
    # still hold them, through their globals and closures: the limit tripwires.py names.
    for name in [name for name in sys.modules if name.startswith(SANDBOX_PREFIX)]:
        del sys.modules[name]
    subject_module = modules["subject"]
    scratch = os.getcwd()  # the launcher starts the worker in its scratch folder
    for path in reversed(config.get("import_paths", [])):
        sys.path.insert(0, path.replace(SCRATCH_PLACEHOLDER, scratch))
    worker.tripwires.importing = True
    try:
        subject = subject_module.load_subject(config["spec"].replace(SCRATCH_PLACEHOLDER, scratch))
    except BaseException as exc:
        worker.send({"op": "load_failed", "error": worker.wire.error_entry(exc), "scratch": scratch})
        return
    finally:
        worker.tripwires.importing = False
    worker.api = dict(subject.names)
    kinds = {name: ("class" if isinstance(value, type) else "function") for name, value in subject.names.items()}
    # How each name prints in process (Hypothesis shows fixtures in its failure messages): module.qualname.
    shown = {name: f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', name)}"
             for name, value in subject.names.items() if isinstance(value, type)}  # fmt: skip
    worker.send({"op": "ready", "names": kinds, "missing": dict(subject.missing), "origin": subject.origin,
                 "scratch": scratch, "shown": shown})  # fmt: skip
    worker.serve()
