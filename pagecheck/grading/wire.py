"""The protocol between the trusted suite and the sandboxed worker: frames of JSON and raw array buffers.

Both sides use this module: the trusted side imports it, the worker receives
its source over the pipe and runs it (the worker may not import pagecheck).
So it imports only the standard library at module level; NumPy and MLX are
imported inside the functions that convert arrays.

A frame is

    MAGIC | u32 header length | u32 buffer count | u64 length of each buffer | header | buffers

with the header a UTF-8 JSON object. Every size is checked against the
reader's limits before anything is allocated, and anything malformed raises
ProtocolError: the trusted side reads frames written by student code.
Nothing is ever unpickled.

Values inside a header: JSON scalars stand for themselves (NaN and the
infinities included); every JSON object carries a tag "$t" (TAG):

    list, tuple   {"$t": "tuple", "items": [...]}      (a list is a JSON array)
    namedtuple    {"$t": "tuple", "items": [...], "fields": [name, ...]}   (back as a RemoteRecord: fields and
                  positions both read)
    dict          {"$t": "dict", "items": [[key, value], ...]}
    bytes         {"$t": "bytes", "buf": index}
    slice         {"$t": "slice", "items": [start, stop, step]}
    array         {"$t": "array", "lib": "mlx"|"numpy", "dtype": name, "shape": [...], "buf": index}
                  (bfloat16 travels as its 16-bit pattern)
    npscalar      {"$t": "npscalar", "dtype": name, "buf": index}
    int subclass  {"$t": "int", "value": n}   (an IntEnum's member, say; only with its origin, else a plain int; back
                  as a RemoteInt)
    handle        {"$t": "handle", "id": n, "type": name, "callable": bool}

An array, named tuple or int subclass the worker sends also carries "origin": n, its number there (OriginOf), and
carries it back. An array of a subclass that defines attributes or methods of its own (a .shape property, a
.tolist(), beyond NumPy's or MLX's special methods) also carries "own": its handle entry, and "names": those names
(own_names), so that the trusted side reads them on the object itself, as the course would in process.
"""

from __future__ import annotations

import collections
import functools
import json
import keyword
import math
import os
import select
import struct
import time
from typing import Any, Callable

MAGIC = b"PCW1"
PREFIX = struct.Struct("<4sII")
BUFFER_LENGTH = struct.Struct("<Q")
TAG = "$t"
MAX_HEADER_BYTES = 16 << 20
MAX_BUFFERS = 1024
MAX_FRAME_BYTES = 512 << 20
MAX_DEPTH = 64
MAX_DIMS = 32
MAX_TEXT = 4000  # characters kept of any message text that crosses from the worker
# An error's message and each of its notes keep more: a check searches them whole for the course's phrase, as
# pytest.raises(match=...) does, and a message may lead with the whole metadata before it (results keep less).
MAX_ERROR_TEXT = 1 << 16
MAX_FIELDS = 64  # of a named tuple
MAX_FIELD_NAME = 64
READ_CHUNK = 1 << 20

# Exceptions that cross as themselves; anything else arrives as SubjectError.
BUILTIN_ERRORS: dict[str, type[BaseException]] = {
    cls.__name__: cls
    for cls in (
        ValueError, TypeError, NotImplementedError, IndexError, KeyError, AttributeError, LookupError,
        ArithmeticError, ZeroDivisionError, OverflowError, RuntimeError, AssertionError, RecursionError,
        MemoryError, StopIteration, UnicodeError,
    )
}  # fmt: skip
MLX_DTYPES = (
    "bool", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
    "float16", "float32", "float64", "bfloat16", "complex64",
)  # fmt: skip
NUMPY_KINDS = "biufc"  # bool, signed, unsigned, float, complex: no objects, strings or records


class ProtocolError(Exception):
    """A frame or value that does not follow the protocol, or a pipe that closed mid-frame."""


class SubjectError(RuntimeError):
    """An exception raised by the subject whose type is not one of BUILTIN_ERRORS."""


class FrameTimeout(Exception):
    """No complete frame arrived before the deadline."""


# -- text --------------------------------------------------------------------------------------------------------


def clean_text(text: object, limit: int = MAX_TEXT) -> str:
    """Any text from the worker as printable UTF-8: lone surrogates replaced, cut to `limit` characters."""
    value = text if isinstance(text, str) else str(text)
    value = value.encode("utf-8", "replace").decode("utf-8")
    return value if len(value) <= limit else value[: limit - 3] + "..."


# -- frames ------------------------------------------------------------------------------------------------------


SMALL_PIECE = 1 << 16  # pieces up to this size are joined into one write


def _frame_encoder() -> Callable[[dict[str, Any], list[Any]], list[Any]]:
    """encode_frame, built from the functions that exist when this runs (the C JSON encoder, the struct
    packers, the builtins it calls), held in its closure: rebinding this module's names, json's or the
    builtins later does not change what it encodes. Where Python has no C JSON encoder it encodes through
    json.dumps with the same options."""
    import json.encoder as json_encoder

    c_make_encoder = getattr(json_encoder, "c_make_encoder", None)
    pack_prefix, pack_length, magic, small_piece = PREFIX.pack, BUFFER_LENGTH.pack, MAGIC, SMALL_PIECE
    view_of, joined, as_list, length_of, is_bytearray = memoryview, b"".join, list, len, bytearray
    if c_make_encoder is not None:

        def refuse(value: Any) -> Any:
            raise TypeError(f"{type(value).__name__} is not JSON serializable")

        # json.dumps(allow_nan=True, separators=(",", ":")): no markers, ASCII strings, no indent, unsorted keys.
        encoder = c_make_encoder(None, refuse, json_encoder.encode_basestring_ascii, None, ":", ",", False, False,
                                 True)  # fmt: skip
        join_text = "".join

        def to_json(header: dict[str, Any]) -> str:
            return join_text(encoder(header, 0))
    else:
        dumps = json.dumps

        def to_json(header: dict[str, Any]) -> str:
            return dumps(header, allow_nan=True, separators=(",", ":"))

    def encode_frame(header: dict[str, Any], buffers: list[Any]) -> list[Any]:
        """The pieces of one frame, ready for write_frame (large buffers are not copied)."""
        text = to_json(header).encode("utf-8")
        views = [view_of(b).cast("B") for b in as_list(buffers)]
        lengths = joined([pack_length(v.nbytes) for v in views])
        pieces: list[Any] = [is_bytearray(pack_prefix(magic, length_of(text), length_of(views)) + lengths + text)]
        for view in views:
            if view.nbytes <= small_piece and type(pieces[-1]) is is_bytearray:
                pieces[-1] += view
            else:
                pieces.append(view)
        return pieces

    return encode_frame


encode_frame = _frame_encoder()


SEQ = "seq"  # a checked writer's frame number, in its header
PIPE_SWAP = "pipe_swap"  # the report a checked writer sends first when it finds another file under its number


def frame_writer(fd: int, *, checked: bool = False) -> Callable[..., None]:
    """write_frame for `fd`, holding encode_frame, os.write and os.fstat as they are when it is called: made
    before untrusted code runs, it writes frames whatever that code later rebinds (this module's names, os.write,
    json's or builtins' attributes); changing it means reaching into its closure.

    `checked` (the worker's writer): each header goes out with SEQ, the frame's number from 0 in the order
    written, so the reader can tell a frame that never reached it, or one the writer did not write; and a frame
    goes out only while `fd` is the file it was when the writer was made (its device and inode). While another
    file is under the number (dup2, where no seccomp filter refuses it) frames are held, a PIPE_SWAP report
    first, and written once the pipe is back, before the next frame."""
    encode, write, view_of, fstat, advance = encode_frame, os.write, memoryview, os.fstat, next
    seq, swap = SEQ, PIPE_SWAP
    numbers, held, swapped = iter(range(1 << 62)), [], [False]

    def identity() -> tuple[int, int] | None:
        try:
            found = fstat(fd)
        except OSError:
            return None
        return found.st_dev, found.st_ino

    made_for = identity() if checked else None

    def write_pieces(pieces: list[Any]) -> None:
        for piece in pieces:
            view = view_of(piece).cast("B")
            while view.nbytes:
                view = view[write(fd, view) :]

    def write_frame_to_fd(header: dict[str, Any], buffers: list[Any] | None = None) -> None:
        if not checked:
            write_pieces(encode(header, buffers or []))
            return
        if made_for is None or identity() != made_for:
            if not swapped[0]:
                swapped[0] = True
                report = {"kind": swap, "detail": "another file was put under the worker's reply descriptor"}
                held.append(encode({"event": report, seq: advance(numbers)}, []))
            held.append(encode({**header, seq: advance(numbers)}, buffers or []))
            return
        swapped[0] = False
        while held:
            write_pieces(held.pop(0))
        write_pieces(encode({**header, seq: advance(numbers)}, buffers or []))

    return write_frame_to_fd


def write_frame(fd: int, header: dict[str, Any], buffers: list[Any] | None = None) -> None:
    frame_writer(fd)(header, buffers)


def readable(fd: int, timeout_s: float) -> bool:
    """Whether `fd` has data or is closed within `timeout_s` seconds. Through poll() where the platform has it:
    select() refuses descriptors of 1024 and up, which a grader running many workers at once reaches."""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        return bool(poller.poll(max(0, math.ceil(timeout_s * 1000))))
    return bool(select.select([fd], [], [], max(timeout_s, 0.0))[0])


class FrameReader:
    """Reads frames from a pipe, through a buffer, with a deadline per frame on the trusted side."""

    def __init__(self, fd: int, *, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self.fd = fd
        self.max_frame_bytes = max_frame_bytes
        self._pending = bytearray()

    def _wait_readable(self, deadline: float | None) -> None:
        """Return once the pipe has data (or is closed); FrameTimeout when the deadline passes first."""
        if deadline is None:
            return
        left = deadline - time.monotonic()
        if left <= 0:
            raise FrameTimeout()
        if not readable(self.fd, left):
            raise FrameTimeout()

    def _fill(self, deadline: float | None) -> None:
        self._wait_readable(deadline)
        chunk = os.read(self.fd, READ_CHUNK)
        if not chunk:
            raise ProtocolError("the pipe closed" + (" mid-frame" if self._pending else ""))
        self._pending += chunk

    def _read_exact(self, count: int, deadline: float | None) -> bytearray:
        if len(self._pending) >= count:
            data = self._pending[:count]
            del self._pending[:count]
            return data
        data = bytearray(count)
        view = memoryview(data)
        done = len(self._pending)
        view[:done] = self._pending
        self._pending = bytearray()
        while done < count:
            self._wait_readable(deadline)
            got = os.readv(self.fd, [view[done : done + READ_CHUNK]])
            if got == 0:
                raise ProtocolError("the pipe closed mid-frame")
            done += got
        return data

    def read(self, deadline: float | None = None) -> tuple[dict[str, Any], list[bytearray]]:
        while len(self._pending) < PREFIX.size:
            self._fill(deadline)
        magic, header_len, count = PREFIX.unpack(bytes(self._read_exact(PREFIX.size, deadline)))
        if magic != MAGIC:
            raise ProtocolError(f"bad frame magic {magic!r}")
        if header_len > MAX_HEADER_BYTES or count > MAX_BUFFERS:
            raise ProtocolError(f"frame header of {header_len} bytes with {count} buffers is over the limits")
        raw_lengths = self._read_exact(BUFFER_LENGTH.size * count, deadline) if count else b""
        lengths = [BUFFER_LENGTH.unpack_from(raw_lengths, i * BUFFER_LENGTH.size)[0] for i in range(count)]
        if header_len + sum(lengths) > self.max_frame_bytes:
            raise ProtocolError(f"frame of {header_len + sum(lengths)} bytes is over {self.max_frame_bytes}")
        text = self._read_exact(header_len, deadline)
        buffers = [self._read_exact(length, deadline) for length in lengths]
        try:
            header = json.loads(text.decode("utf-8", "surrogatepass"))
        except (ValueError, RecursionError) as exc:
            raise ProtocolError(f"frame header is not JSON: {type(exc).__name__}") from None
        if not isinstance(header, dict):
            raise ProtocolError("frame header is not a JSON object")
        return header, buffers


# -- values ------------------------------------------------------------------------------------------------------

HandleOf = Callable[[Any], dict[str, Any]]  # an object that is not plain data -> its handle entry
ResolveHandle = Callable[[dict[str, Any]], Any]  # a handle entry -> the local object it stands for
# An array's, a named tuple's or an int subclass's origin: the worker numbers those it sends (OriginOf: value ->
# its number, or None; an entry carries it as "origin"), the trusted side sends the number back with the value it
# decoded from one, and the worker hands on its own object where that still holds the same values (OnArray: an
# entry and the array or record decoded from it -> the value to use).
OriginOf = Callable[[Any], "int | None"]
OnArray = Callable[[dict[str, Any], Any], Any]


def _mlx_module() -> Any:
    import sys

    return sys.modules.get("mlx.core")


def dtype_name(array: Any) -> str:
    return str(array.dtype).rsplit(".", 1)[-1]


def array_entry(array: Any, buffers: list[Any]) -> dict[str, Any]:
    import numpy as np

    mx = _mlx_module()
    if mx is not None and isinstance(array, mx.array):
        name = dtype_name(array)
        if name not in MLX_DTYPES:
            raise TypeError(f"an MLX array of dtype {name} cannot cross to the worker")
        raw = np.array(mx.view(array, mx.uint16)) if name == "bfloat16" else np.array(array)
        lib = "mlx"
    else:
        # Read as a plain ndarray: a subclass's own .dtype, .shape or .astype() describe no bytes that cross.
        plain = np.ndarray.view(array, np.ndarray)
        if plain.dtype.kind not in NUMPY_KINDS or plain.dtype.fields is not None:
            raise TypeError(f"a NumPy array of dtype {plain.dtype} cannot cross to the worker")
        # Bytes cross in this machine's order: a big-endian array would otherwise be read back as another number.
        raw = plain if plain.dtype.isnative else plain.astype(plain.dtype.newbyteorder("="))
        name, lib = plain.dtype.name, "numpy"
    raw = np.ascontiguousarray(raw).view(np.ndarray)
    buffers.append(raw.reshape(-1).view(np.uint8) if raw.size else b"")
    return {TAG: "array", "lib": lib, "dtype": name, "shape": list(raw.shape), "buf": len(buffers) - 1}


MAX_OWN_NAMES = 64  # of an array subclass, the names that cross with it


def own_names(entry: dict[str, Any]) -> frozenset[str] | None:
    """An array entry's "names" (those its subclass defines of its own, read on its "own" handle), checked; None
    where it carries none."""
    if "own" not in entry:
        return None
    names, own = entry.get("names"), entry.get("own")
    if (not isinstance(own, dict) or own.get(TAG) != "handle" or type(own.get("id")) is not int
            or not isinstance(names, list) or len(names) > MAX_OWN_NAMES
            or not all(isinstance(n, str) and n.isidentifier() and len(n) <= MAX_FIELD_NAME for n in names)):
        raise ProtocolError("an array's own names are not a handle and a list of at most 64 identifiers")
    return frozenset(names)


def _is_numpy(value: Any, attribute: str) -> bool:
    import sys

    np = sys.modules.get("numpy")
    return np is not None and isinstance(value, getattr(np, attribute))


def to_wire(
    value: Any, buffers: list[Any], handle_of: HandleOf, depth: int = 0, origin_of: OriginOf | None = None
) -> Any:
    """`value` as a header entry; arrays append their bytes to `buffers` (with the number `origin_of` gives them, if
    any, as "origin"); other objects go to `handle_of`."""
    if depth > MAX_DEPTH:
        raise ValueError(f"a value nested deeper than {MAX_DEPTH} levels cannot cross the pipe")
    if value is None or isinstance(value, bool) or type(value) is str:
        return value
    if isinstance(value, str):
        # A str subclass (a str enum's member, say) is an object of its own type: it crosses as a handle, so the
        # code that made it gets it back as itself, which it may know by its type or identity.
        return handle_of(value)
    if isinstance(value, int):
        # An int subclass (an IntEnum's member, say) may be known by its type where it goes back: it carries its
        # origin, and the worker hands back its own object for the same number (the trusted side's own, or one
        # whose origin is unknown, crosses as the plain int).
        # Its value is the int it is, as int's own == compares it: not what an __int__ of its own answers.
        origin = None if type(value) is int or origin_of is None else origin_of(value)
        number = int.__int__(value)
        return number if origin is None else {TAG: "int", "value": number, "origin": origin}
    if isinstance(value, float):
        return float.__float__(value)  # a float subclass's own value, as with an int
    if isinstance(value, (list, tuple)):
        fields = _named_fields(value)
        if isinstance(value, tuple) and type(value) is not tuple and fields is None:
            # A tuple subclass with properties of its own (a hand-made record) keeps them only as an object.
            return handle_of(value)
        if isinstance(value, list) and _names_of_its_own(type(value), list, special=True):
            # So does a list subclass with methods, properties or special methods of its own (a table with the .shape
            # and .tolist() the course reads, page ids whose __getitem__ the course's slice calls); one with none is
            # its items.
            return handle_of(value)
        # Its items as it holds them (a named tuple's fields read them so), not as an __iter__ of its own gives them.
        held = tuple.__iter__(value) if isinstance(value, tuple) else list.__iter__(value)
        items = [to_wire(item, buffers, handle_of, depth + 1, origin_of) for item in held]
        if isinstance(value, list):
            return items
        if fields is None:
            return {TAG: "tuple", "items": items}
        origin = None if origin_of is None else origin_of(value)
        entry = {TAG: "tuple", "items": items, "fields": fields}
        return entry if origin is None else {**entry, "origin": origin}
    if type(value) is dict:
        return {TAG: "dict", "items": [[to_wire(k, buffers, handle_of, depth + 1, origin_of),
                                        to_wire(v, buffers, handle_of, depth + 1, origin_of)]
                                       for k, v in value.items()]}  # fmt: skip
    if isinstance(value, (bytes, bytearray)):
        buffers.append(bytes(value))
        return {TAG: "bytes", "buf": len(buffers) - 1}
    if type(value) is slice:  # an index, as `ids[:2]` hands one to a handle's __getitem__
        return {TAG: "slice", "items": [to_wire(part, buffers, handle_of, depth + 1, origin_of)
                                        for part in (value.start, value.stop, value.step)]}  # fmt: skip
    mx = _mlx_module()
    if _is_numpy(value, "ndarray") or (mx is not None and isinstance(value, mx.array)):
        import numpy as np

        entry = array_entry(value, buffers)
        origin = None if origin_of is None else origin_of(value)
        entry = entry if origin is None else {**entry, "origin": origin}
        # An array of a subclass with attributes or methods of its own (a .shape property, a .tolist()) also crosses
        # with its handle, so that those answer as the object itself does: the course reads a table's own .shape.
        # A handle_of that answers None (the trusted side's, for an array of its own) sends the values alone.
        # Special methods do not count: NumPy's and MLX's protocols read the bytes that cross.
        base = mx.array if entry["lib"] == "mlx" else np.ndarray
        names = _names_of_its_own(type(value), base, special=False)[:MAX_OWN_NAMES]
        own = handle_of(value) if names else None
        return entry if own is None else {**entry, "own": own, "names": names}
    if _is_numpy(value, "generic") and value.dtype.kind in NUMPY_KINDS:
        import numpy as np

        buffers.append(np.array(value).tobytes())
        return {TAG: "npscalar", "dtype": value.dtype.name, "buf": len(buffers) - 1}
    return handle_of(value)


# What a class body defines without changing how its instances read: one that defines nothing else is its items.
CLASS_BOOKKEEPING = frozenset({
    "__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__slots__", "__annotations__",
    "__annotate__", "__orig_bases__", "__parameters__", "__type_params__", "__firstlineno__",
    "__static_attributes__", "__classcell__", "__init__", "__new__",
})


def _names_of_its_own(cls: type, base: type, *, special: bool) -> list[str]:
    """The names, sorted, that `cls`, a subclass of `base`, or a class between them defines beyond
    CLASS_BOOKKEEPING: methods and properties, and with `special` special methods too (a list's __getitem__ or
    __eq__ of its own is what the course's asserts read, where the items crossed would be what its __iter__
    gives)."""
    mro = cls.__mro__
    names = {name for klass in mro[: mro.index(base)] for name in vars(klass)
             if isinstance(name, str) and name not in CLASS_BOOKKEEPING
             and (special or not (name.startswith("__") and name.endswith("__")))}  # fmt: skip
    return sorted(names)


def _named_fields(value: tuple[Any, ...] | list[Any]) -> list[str] | None:
    """A named tuple's field names (a metadata record a subject made with typing.NamedTuple, say), else None."""
    fields = getattr(type(value), "_fields", None)
    if isinstance(value, tuple) and isinstance(fields, tuple) and len(fields) == len(value):
        if all(isinstance(name, str) for name in fields):
            return list(fields)
    return None


class RecordOrigin:
    """What a RemoteRecord holds beside its fields: where the named tuple it was decoded from came from (the
    worker's number for it, OriginOf, with what the decoding side needs to send it back), set by the side that
    decoded it; a record built from it (`_replace`) has none. Underscored, as no field's name may be (_record)."""

    _origin: Any = None


class RemoteInt(int, RecordOrigin):
    """An int subclass's value from the worker (an IntEnum's member, say): an int here, which goes back to the worker
    as the object it was decoded from."""


@functools.lru_cache(maxsize=256)
def _record_type(fields: tuple[str, ...]) -> type:
    # A subclass without __slots__, so that an instance can hold its origin (a tuple takes no weak reference).
    return type("RemoteRecord", (collections.namedtuple("RemoteRecord", fields), RecordOrigin), {})


def _record(fields: Any, items: list[Any]) -> tuple[Any, ...]:
    """A named tuple from the worker, rebuilt here from its field names (checked) and items."""
    if (not isinstance(fields, list) or len(fields) != len(items) or len(fields) > MAX_FIELDS
            or len(set(fields)) != len(fields)
            or not all(isinstance(name, str) and name.isidentifier() and name.isascii() and not name.startswith("_")
                       and not keyword.iskeyword(name) and len(name) <= MAX_FIELD_NAME for name in fields)):
        raise ProtocolError("a named tuple's fields are not as many distinct, plain identifiers as its items")
    return _record_type(tuple(fields))(*items)


def _shape(entry: dict[str, Any]) -> tuple[int, ...]:
    shape = entry.get("shape")
    if not isinstance(shape, list) or len(shape) > MAX_DIMS:
        raise ProtocolError(f"array shape {shape!r} is not a list of at most {MAX_DIMS} sizes")
    if not all(type(n) is int and n >= 0 for n in shape):
        raise ProtocolError(f"array shape {shape!r} holds something other than sizes")
    return tuple(shape)


def _buffer(entry: dict[str, Any], buffers: list[bytearray]) -> bytearray:
    index = entry.get("buf")
    if type(index) is not int or not 0 <= index < len(buffers):
        raise ProtocolError(f"buffer index {index!r} is out of range")
    return buffers[index]


def _array_from(entry: dict[str, Any], buffers: list[bytearray], allow_mlx: bool) -> Any:
    import numpy as np

    name, lib, shape = entry.get("dtype"), entry.get("lib"), _shape(entry)
    if lib not in ("mlx", "numpy") or (lib == "mlx" and name not in MLX_DTYPES):
        raise ProtocolError(f"array of library {lib!r} and dtype {name!r} is not supported")
    stored = "uint16" if name == "bfloat16" else name
    try:
        dtype = np.dtype(stored)
    except TypeError:
        raise ProtocolError(f"dtype {name!r} is not a NumPy dtype") from None
    if dtype.kind not in NUMPY_KINDS:
        raise ProtocolError(f"dtype {name!r} is not a numeric dtype")
    data = _buffer(entry, buffers)
    if math.prod(shape) * dtype.itemsize != len(data):
        raise ProtocolError(f"array of shape {shape} and dtype {name} does not match its {len(data)} bytes")
    array = np.frombuffer(data, dtype=dtype).reshape(shape) if data else np.zeros(shape, dtype=dtype)
    if lib == "numpy" or not allow_mlx:
        return array
    import mlx.core as mx

    converted = mx.array(array)
    return mx.view(converted, mx.bfloat16) if name == "bfloat16" else converted


def from_wire(
    node: Any, buffers: list[bytearray], resolve: ResolveHandle, *, clean: bool, depth: int = 0,
    on_array: OnArray | None = None,
) -> Any:
    """A header entry back as a value. `clean`: strings from the worker pass through clean_text. `on_array` gets each
    array's entry and the array decoded from it, and returns the array to use."""
    if depth > MAX_DEPTH:
        raise ProtocolError(f"value nested deeper than {MAX_DEPTH} levels")
    if node is None or isinstance(node, (bool, int, float)):
        return node
    if isinstance(node, str):
        return clean_text(node, limit=1 << 20) if clean else node
    if isinstance(node, list):
        return [from_wire(item, buffers, resolve, clean=clean, depth=depth + 1, on_array=on_array) for item in node]
    if not isinstance(node, dict):
        raise ProtocolError(f"unexpected JSON value of type {type(node).__name__}")
    tag = node.get(TAG)
    if tag == "tuple" and isinstance(node.get("items"), list):
        items = [from_wire(item, buffers, resolve, clean=clean, depth=depth + 1, on_array=on_array)
                 for item in node["items"]]
        if "fields" not in node:
            return tuple(items)
        record = _record(node["fields"], items)
        return record if on_array is None or "origin" not in node else on_array(node, record)
    if tag == "dict" and isinstance(node.get("items"), list):
        result = {}
        for pair in node["items"]:
            if not isinstance(pair, list) or len(pair) != 2:
                raise ProtocolError("a dict item is not a [key, value] pair")
            key = from_wire(pair[0], buffers, resolve, clean=clean, depth=depth + 1, on_array=on_array)
            try:
                result[key] = from_wire(pair[1], buffers, resolve, clean=clean, depth=depth + 1, on_array=on_array)
            except TypeError:
                raise ProtocolError("a dict key is not hashable") from None
        return result
    if tag == "bytes":
        return bytes(_buffer(node, buffers))
    if tag == "slice" and isinstance(node.get("items"), list) and len(node["items"]) == 3:
        return slice(*(from_wire(part, buffers, resolve, clean=clean, depth=depth + 1, on_array=on_array)
                       for part in node["items"]))  # fmt: skip
    if tag == "array":
        array = _array_from(node, buffers, allow_mlx=True)
        return array if on_array is None else on_array(node, array)
    if tag == "int" and type(node.get("value")) is int:
        number = node["value"]
        return number if on_array is None or "origin" not in node else on_array(node, RemoteInt(number))
    if tag == "npscalar":
        array = _array_from({**node, "lib": "numpy", "shape": []}, buffers, allow_mlx=False)
        return array[()]
    if tag == "handle" and type(node.get("id")) is int:
        return resolve(node)
    raise ProtocolError(f"unknown value tag {tag!r}")


# -- errors ------------------------------------------------------------------------------------------------------


MAX_NOTES = 16  # of an exception's notes, the ones that cross
# The builtins a subclass crosses as (SubjectError is a RuntimeError); one deriving from several of them is each.
ALSO_ERRORS = ("ValueError", "TypeError", "NotImplementedError", "RuntimeError")


def error_entry(error: BaseException) -> dict[str, Any]:
    """How an exception raised by subject code crosses the pipe: a builtin's name, or SubjectError."""
    name = type(error).__name__
    builtin = next((n for n, cls in BUILTIN_ERRORS.items() if type(error) is cls), None)
    if builtin is None:  # a subclass of a builtin keeps the builtin it derives from, named after itself
        base = next((n for n, cls in BUILTIN_ERRORS.items() if isinstance(error, cls)), None)
        builtin = base if base in ("ValueError", "TypeError", "NotImplementedError", "MemoryError") else None
        # A SubjectError is named on the trusted side (error_from); only a builtin's message carries the name.
        message = f"{name}: {error}" if builtin is not None else str(error)
    else:
        message = str(error.args[0]) if isinstance(error, KeyError) and len(error.args) == 1 else str(error)
    # PEP 678 notes: pytest.raises(match=...) searches them with the message, so the course's phrases may be there.
    notes = [clean_text(note, MAX_ERROR_TEXT) for note in getattr(error, "__notes__", ())[:MAX_NOTES]
             if isinstance(note, str)]  # fmt: skip
    entry: dict[str, Any] = {"type": builtin or "SubjectError", "name": clean_text(name, 200),
                             "message": clean_text(message, MAX_ERROR_TEXT)}  # fmt: skip
    # A subclass of several builtins (class KvError(ValueError, RuntimeError)) is each of them in process: the others
    # of ALSO_ERRORS it derives from cross beside its type, so that a check catching any of them catches it here too.
    crossing = BUILTIN_ERRORS.get(builtin or "", SubjectError)
    also = [n for n in ALSO_ERRORS if isinstance(error, BUILTIN_ERRORS[n])
            and not issubclass(crossing, BUILTIN_ERRORS[n])]
    if also and builtin != "MemoryError":
        entry["also"] = also
    return {**entry, "notes": notes} if notes else entry


@functools.lru_cache(maxsize=64)
def _error_class(base: type[BaseException], also: tuple[type[BaseException], ...]) -> type[BaseException]:
    """An exception class, named as `base`, that derives from `base` and each of `also` (only the most derived of
    them); `base` where they do not combine."""
    kinds = [base, *also]
    kinds = [k for k in kinds if not any(o is not k and issubclass(o, k) for o in kinds)]
    if kinds == [base]:
        return base
    try:
        return type(base.__name__, tuple(kinds), {"__module__": base.__module__, "__qualname__": base.__qualname__})
    except TypeError:
        return base


def error_from(entry: Any) -> BaseException:
    """The exception to raise on the trusted side for an error entry from the worker."""
    if not isinstance(entry, dict):
        return ProtocolError("an error reply without its entry")
    message = clean_text(entry.get("message", ""), MAX_ERROR_TEXT)
    cls = BUILTIN_ERRORS.get(str(entry.get("type")))
    also = entry.get("also")
    if isinstance(also, list) and cls is not MemoryError:
        kinds = tuple(dict.fromkeys(BUILTIN_ERRORS[n] for n in also[: len(ALSO_ERRORS)] if n in ALSO_ERRORS))
        combined = _error_class(SubjectError if cls is None else cls, kinds)
    else:
        combined = SubjectError if cls is None else cls
    named = issubclass(combined, SubjectError)
    error = combined(f"{clean_text(entry.get('name', 'Exception'), 200)}: {message}" if named else message)
    notes = entry.get("notes")
    if isinstance(notes, list) and hasattr(error, "add_note"):
        for note in notes[:MAX_NOTES]:
            if isinstance(note, str):
                error.add_note(clean_text(note, MAX_ERROR_TEXT))
    return error
