"""The worker protocol's codec: values round-trip exactly, and anything malformed is a ProtocolError."""

from __future__ import annotations

import json
import os
import struct
import threading
import time
from types import SimpleNamespace

import mlx.core as mx
import numpy as np
import pytest

from pagecheck.grading import wire


class Handle:
    """A stand-in for an object that crosses as a handle."""

    def __init__(self, number: int) -> None:
        self.number = number


def round_trip(value: object, *, clean: bool = True) -> object:
    buffers: list[object] = []
    node = wire.to_wire(value, buffers, lambda obj: {wire.TAG: "handle", "id": obj.number})
    read, write = os.pipe()

    def send() -> None:
        wire.write_frame(write, {"v": node}, buffers)
        os.close(write)

    writer = threading.Thread(target=send)
    writer.start()
    header, received = wire.FrameReader(read).read(time.monotonic() + 5)
    writer.join()
    os.close(read)
    return wire.from_wire(header["v"], received, lambda entry: Handle(entry["id"]), clean=clean)


def test_plain_values_round_trip() -> None:
    value = [None, True, 3, -2**70, 1.5, "ünï", {"a": (1, 2), 3: [4.0]}, b"\x00\xff", ()]
    assert round_trip(value) == value
    back = round_trip([float("nan"), float("inf"), -float("inf")])
    assert np.isnan(back[0]) and back[1:] == [float("inf"), -float("inf")]


def test_tuples_stay_tuples_and_handles_resolve() -> None:
    back = round_trip((1, [Handle(7)], {"h": Handle(9)}))
    assert isinstance(back, tuple) and isinstance(back[1], list)
    assert back[1][0].number == 7 and back[2]["h"].number == 9


def test_a_named_tuple_keeps_its_field_names() -> None:
    """A metadata record made with typing.NamedTuple crossed as a plain tuple: the grader's `metadata.block_table`
    was an AttributeError, and a submission the course accepts lost 20 course points."""
    from typing import NamedTuple

    class Metadata(NamedTuple):
        block_table: list
        context_lens: list
        page_size: int
        mask: str | None = None

    back = round_trip(Metadata([[0, 1]], [6], 4, "causal"))
    assert back.block_table == [[0, 1]] and back.context_lens == [6] and back.page_size == 4 and back.mask == "causal"
    assert tuple(back) == ([[0, 1]], [6], 4, "causal")


def test_a_tuple_subclass_with_properties_of_its_own_crosses_as_an_object() -> None:
    """A hand-made record (a tuple subclass with properties, no _fields) crossed as a plain tuple and lost its
    properties: a submission the course accepts lost 25 course points to AttributeErrors."""

    class Record(tuple):
        @property
        def block_table(self):
            return self[0]

    record = Record(([1], 2))
    record.number = 5
    assert round_trip(record).number == 5  # sent as a handle, as any other object
    ids = type("Ids", (list,), {})([3, 4])
    assert round_trip(ids) == [3, 4] and type(round_trip(ids)) is list  # a list subclass is still its items...
    table = type("Table", (list,), {"shape": property(lambda self: (len(self),))})([3, 4])
    table.number = 6
    assert round_trip(table).number == 6  # ...unless it has names of its own (the course reads a table's .shape)
    sliced = type("Ids", (list,), {"__getitem__": lambda self, i: tuple(list.__getitem__(self, i))})([3, 4])
    sliced.number = 7
    assert round_trip(sliced).number == 7  # ...or special methods (the course slices page ids: ids[:2] == [0, 1])
    assert round_trip(type("Ids", (list,), {"__init__": list.__init__, "__doc__": "ids"})([3, 4])) == [3, 4]


def test_an_array_subclass_with_names_of_its_own_crosses_with_its_handle() -> None:
    """An ndarray subclass whose .shape property answers a list crossed as a plain array, its own .shape lost: it
    carries its handle and those names (the trusted side reads them there), its values as the bytes it holds, not
    what its own .shape or .dtype say; a subclass with special methods alone, or one the handle_of refuses (None),
    crosses as its values."""

    class ListShape(np.ndarray):
        @property
        def shape(self):
            return list(np.ndarray.shape.__get__(self))

        dtype = property(lambda self: np.dtype(np.float64))

    table = np.arange(6, dtype=np.int32).reshape(3, 2).view(ListShape)
    table.number = 4
    buffers: list[object] = []
    node = wire.to_wire(table, buffers, lambda obj: {wire.TAG: "handle", "id": obj.number})
    assert node["own"] == {wire.TAG: "handle", "id": 4} and node["names"] == ["dtype", "shape"]
    assert node["dtype"] == "int32" and node["shape"] == [3, 2] and wire.own_names(node) == {"dtype", "shape"}
    back = round_trip(table)
    assert type(back) is np.ndarray and back.dtype == np.int32 and back.tolist() == [[0, 1], [2, 3], [4, 5]]
    assert "own" not in wire.to_wire(table, [], lambda obj: None)
    finalized = type("Finalized", (np.ndarray,), {"__array_finalize__": lambda self, obj: None})
    assert "own" not in wire.to_wire(np.zeros(2).view(finalized), [], lambda obj: {wire.TAG: "handle", "id": 1})
    listed = type("ListShape", (mx.array,), {"shape": property(lambda self: list(mx.array.shape.__get__(self)))})
    node = wire.to_wire(listed(mx.zeros((3, 2))), [], lambda obj: {wire.TAG: "handle", "id": 2})
    assert node["lib"] == "mlx" and node["names"] == ["shape"] and node["shape"] == [3, 2]
    for bad in ({wire.TAG: "handle"}, None, 3):
        with pytest.raises(wire.ProtocolError):
            wire.own_names({**node, "own": bad})
    with pytest.raises(wire.ProtocolError):
        wire.own_names({**node, "names": ["not a name"]})


def test_an_int_subclass_crosses_as_its_value_and_with_its_origin_as_a_remote_int() -> None:
    """An IntEnum's member from the worker: a plain int where no origin is asked (the suite's own, and in this codec
    alone), else its value with the origin, decoded as a RemoteInt that carries it back."""
    import enum

    member = enum.IntEnum("Kind", "ONE TWO").TWO
    assert round_trip(member) == 2 and type(round_trip(member)) is int
    buffers: list[object] = []
    node = wire.to_wire([member, 3], buffers, lambda obj: {}, origin_of=lambda value: 41)
    assert node == [{wire.TAG: "int", "value": 2, "origin": 41}, 3]  # a plain int asks for no origin
    seen: list[object] = []
    back = wire.from_wire(node, [], lambda entry: None, clean=True, on_array=lambda entry, value: seen.append(entry) or value)
    assert back == [2, 3] and type(back[0]) is wire.RemoteInt and seen == [node[0]]
    assert type(wire.from_wire(node[0], [], lambda entry: None, clean=True)) is int


def test_a_named_tuple_crosses_with_the_fields_it_holds_not_what_its_own_iter_gives() -> None:
    """The course reads a metadata's fields by name, from what the tuple holds: an __iter__ of its own that gives
    other items must not change what crosses."""
    from typing import NamedTuple

    class Metadata(NamedTuple):
        block_table: list
        context_lens: list

        def __iter__(self):
            return iter(([[9]], [9]))

    back = round_trip(Metadata([[0, 1]], [6]))
    assert back.block_table == [[0, 1]] and back.context_lens == [6]


def test_an_int_or_float_subclass_crosses_as_the_number_it_is_not_what_its_own_int_says() -> None:
    """The course compares a pool's counters with int's own == (pool.num_free_pages == 0): a subclass whose __int__,
    __index__ or __float__ answers another number crosses as the number it holds, with or without an origin."""

    class Count(int):
        def __int__(self) -> int:
            return int.__int__(self) - 1

        __index__ = __int__

    class Scale(float):
        def __float__(self) -> float:
            return 0.0

    assert round_trip(Count(1)) == 1 and round_trip(Scale(0.5)) == 0.5
    node = wire.to_wire(Count(1), [], lambda obj: {}, origin_of=lambda value: 7)
    assert node == {wire.TAG: "int", "value": 1, "origin": 7}


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "int32", "int64", "uint16", "bool", "complex64"])
def test_numpy_arrays_round_trip_exactly(dtype: str) -> None:
    array = (np.arange(24).reshape(2, 3, 4) % 5).astype(dtype)
    back = round_trip(array)
    assert isinstance(back, np.ndarray) and back.dtype == array.dtype and back.shape == array.shape
    assert np.array_equal(back, array)
    back[0, 0, 0] = 1  # a decoded array is writable, as one the subject made would be


@pytest.mark.parametrize("dtype", [">f4", ">i8", "<f8", ">c8"])
def test_arrays_of_either_byte_order_round_trip_as_their_numbers(dtype: str) -> None:
    array = np.array([[1.5, -2.0, 3.25]]).astype(dtype)
    back = round_trip(array)
    assert back.dtype == array.dtype.newbyteorder("=") and back.dtype.isnative
    np.testing.assert_array_equal(back, array)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "int32", "uint32", "bool_"])
def test_mlx_arrays_round_trip_bit_for_bit(dtype: str) -> None:
    values = mx.array(np.linspace(-3.3, 7.7, 30).reshape(5, 6)).astype(getattr(mx, dtype))
    back = round_trip(values)
    assert isinstance(back, mx.array) and back.dtype == values.dtype and back.shape == values.shape
    assert bool(mx.array_equal(back, values))
    if dtype == "bfloat16":
        assert np.array_equal(np.array(mx.view(back, mx.uint16)), np.array(mx.view(values, mx.uint16)))


def test_empty_and_scalar_arrays_round_trip() -> None:
    assert round_trip(np.zeros((0, 3), np.float32)).shape == (0, 3)
    assert round_trip(mx.array(2.5)).item() == 2.5
    scalar = round_trip(np.int64(-4))
    assert isinstance(scalar, np.int64) and scalar == -4


def test_text_from_the_worker_is_cleaned() -> None:
    assert round_trip("bad \udcff byte") == "bad ? byte"
    assert round_trip("bad \udcff byte", clean=False) == "bad \udcff byte"


def test_unsupported_arrays_are_refused() -> None:
    with pytest.raises(TypeError):
        wire.to_wire(np.array(["a"], dtype=object), [], lambda obj: {})


def test_errors_cross_as_builtins_or_subject_error() -> None:
    class PoolError(ValueError):
        pass

    class Odd(Exception):
        pass

    assert type(wire.error_from(wire.error_entry(ValueError("bad page_size")))) is ValueError
    subclass = wire.error_from(wire.error_entry(PoolError("Page 3 is already free")))
    assert type(subclass) is ValueError and str(subclass) == "PoolError: Page 3 is already free"
    other = wire.error_from(wire.error_entry(Odd("x")))
    assert type(other) is wire.SubjectError and str(other) == "Odd: x"  # named once ("Odd: Odd: x" before)
    assert str(wire.error_from(wire.error_entry(SystemExit(0)))) == "SystemExit: 0"
    assert str(wire.error_from(wire.error_entry(KeyError("k")))) == "'k'"
    assert type(wire.error_from({"type": "SystemExit", "message": "1"})) is wire.SubjectError


def test_a_slice_crosses_as_a_slice() -> None:
    """The course's `cache.page_ids[:2] == [0, 1]` hands a slice to page_ids' __getitem__: where page_ids is a view
    (a handle), the slice crossed as nothing ("a slice cannot be sent") and a course clause failed."""
    assert round_trip([slice(None, 2), slice(1, -1, 2)]) == [slice(None, 2), slice(1, -1, 2)]
    with pytest.raises(wire.ProtocolError):
        wire.from_wire({wire.TAG: "slice", "items": [1, 2]}, [], lambda entry: None, clean=True)


def test_an_error_deriving_from_several_builtins_is_each_of_them() -> None:
    """class KvError(ValueError, RuntimeError) re-raising the course's injected page write failure: the course's
    pytest.raises(RuntimeError) takes it, and it crossed as a ValueError alone, which a check catching RuntimeError
    missed."""

    class KvError(ValueError, RuntimeError):
        pass

    class Declined(NotImplementedError, TypeError):
        pass

    crossed = wire.error_from(wire.error_entry(KvError("append rolled back: injected page write failure")))
    assert isinstance(crossed, ValueError) and isinstance(crossed, RuntimeError)
    assert type(crossed).__name__ == "ValueError"
    assert str(crossed) == "KvError: append rolled back: injected page write failure"
    declined = wire.error_from(wire.error_entry(Declined("bfloat16")))
    assert isinstance(declined, TypeError) and isinstance(declined, NotImplementedError)
    assert "also" not in wire.error_entry(NotImplementedError("n")) and "also" not in wire.error_entry(KeyError("k"))
    # Only the builtins a subclass may cross as are taken from the worker's word.
    forged = wire.error_from({"type": "ValueError", "message": "m", "also": ["SystemExit", "AssertionError", 3, []]})
    assert type(forged) is ValueError


def test_an_errors_notes_cross_with_it() -> None:
    # pytest.raises(match=...) searches a message's PEP 678 notes too, so the course's phrase may be in one.
    error = ValueError("context_lens[0]=-1")
    for note in ("context lengths must be nonnegative", *(f"note {i}" for i in range(40))):
        error.add_note(note)
    crossed = wire.error_from(wire.error_entry(error))
    assert type(crossed) is ValueError and str(crossed) == "context_lens[0]=-1"
    assert crossed.__notes__ == error.__notes__[: wire.MAX_NOTES]
    assert "notes" not in wire.error_entry(ValueError("no notes"))
    forged = wire.error_from({"type": "ValueError", "message": "m", "notes": ["a\x00b", 3, "c"]})
    assert forged.__notes__ == [wire.clean_text("a\x00b"), "c"]


def test_a_course_phrase_after_a_long_message_still_crosses() -> None:
    """A message that leads with the whole block table lost its course phrase past the first 4,000 characters,
    where pytest.raises(match=...) in process finds it: an error's message and notes keep MAX_ERROR_TEXT."""
    table = [[page, -1] for page in range(2000)]  # 16,000 characters of table
    error = ValueError(f"block_table={table}: live page id is aliased")
    error.add_note(f"context_lens={[7] * 2000}: must be zero or at least query length")
    crossed = wire.error_from(wire.error_entry(error))
    assert str(crossed) == str(error) and len(str(crossed)) > wire.MAX_TEXT
    assert crossed.__notes__ == error.__notes__
    huge = wire.error_from(wire.error_entry(ValueError("x" * (wire.MAX_ERROR_TEXT + 10))))
    assert len(str(huge)) == wire.MAX_ERROR_TEXT and str(huge).endswith("...")


def _frame_bytes(header_text: bytes, lengths: list[int], payload: bytes = b"", magic: bytes = wire.MAGIC) -> bytes:
    prefix = wire.PREFIX.pack(magic, len(header_text), len(lengths))
    return prefix + b"".join(struct.pack("<Q", n) for n in lengths) + header_text + payload


def read_raw(data: bytes, **limits: int) -> tuple[dict, list]:
    read, write = os.pipe()
    writer = threading.Thread(target=lambda: (os.write(write, data), os.close(write)))
    writer.start()
    try:
        return wire.FrameReader(read, **limits).read(time.monotonic() + 5)
    finally:
        writer.join()
        os.close(read)


@pytest.mark.parametrize(
    "data",
    [
        _frame_bytes(b"{}", [], magic=b"XXXX"),
        wire.PREFIX.pack(wire.MAGIC, wire.MAX_HEADER_BYTES + 1, 0),
        wire.PREFIX.pack(wire.MAGIC, 2, wire.MAX_BUFFERS + 1),
        _frame_bytes(b"{not json", []),
        _frame_bytes(b"[1, 2]", []),
        _frame_bytes(b"{}", [5], b"abc"),  # the pipe closes mid-frame
    ],
    ids=["magic", "header-size", "buffer-count", "json", "not-an-object", "short"],
)
def test_malformed_frames_are_protocol_errors(data: bytes) -> None:
    with pytest.raises(wire.ProtocolError):
        read_raw(data)


def test_frame_over_the_reader_limit_is_refused_before_reading_it() -> None:
    with pytest.raises(wire.ProtocolError, match="over"):
        read_raw(_frame_bytes(b"{}", [1 << 40]), max_frame_bytes=1 << 20)


@pytest.mark.parametrize(
    "node",
    [
        {wire.TAG: "array", "lib": "numpy", "dtype": "float32", "shape": [3], "buf": 0},  # 3 floats, 4 bytes
        {wire.TAG: "array", "lib": "numpy", "dtype": "float32", "shape": [-1], "buf": 0},
        {wire.TAG: "array", "lib": "numpy", "dtype": "object", "shape": [1], "buf": 0},
        {wire.TAG: "array", "lib": "torch", "dtype": "float32", "shape": [1], "buf": 0},
        {wire.TAG: "array", "lib": "numpy", "dtype": "float32", "shape": [1], "buf": 3},
        {wire.TAG: "pickle", "data": "x"},
        {wire.TAG: "dict", "items": [[[1], 2]]},
        json.loads("[" * 200 + "]" * 200),
        {wire.TAG: "tuple", "items": [1, 2], "fields": ["a"]},
        {wire.TAG: "tuple", "items": [1, 2], "fields": ["a", "a"]},
        {wire.TAG: "tuple", "items": [1], "fields": ["__class__"]},
        {wire.TAG: "tuple", "items": [1], "fields": ["not a name"]},
        {wire.TAG: "tuple", "items": [1], "fields": ["def"]},
        {wire.TAG: "tuple", "items": [1], "fields": "a"},
        {wire.TAG: "int", "value": "1", "origin": 1},
        {wire.TAG: "int", "value": True, "origin": 1},
        {wire.TAG: "int", "value": 1.5, "origin": 1},
    ],
    ids=["size", "negative", "object", "library", "buffer-index", "unknown-tag", "unhashable-key", "too-deep",
         "fields-count", "fields-repeated", "field-dunder", "field-not-identifier", "field-keyword", "fields-not-list",
         "int-text", "int-bool", "int-float"],
)
def test_malformed_values_are_protocol_errors(node: object) -> None:
    with pytest.raises(wire.ProtocolError):
        wire.from_wire(node, [bytearray(4)], lambda entry: None, clean=True)


def test_reader_deadline_and_closed_pipe() -> None:
    read, write = os.pipe()
    with pytest.raises(wire.FrameTimeout):
        wire.FrameReader(read).read(time.monotonic() + 0.2)
    os.close(write)
    with pytest.raises(wire.ProtocolError, match="closed"):
        wire.FrameReader(read).read(time.monotonic() + 1)
    os.close(read)


def test_large_buffers_cross_a_pipe_intact() -> None:
    array = np.random.default_rng(0).standard_normal((64, 8, 16, 128)).astype(np.float32)  # 4 MiB
    back = round_trip([array, array[:1]])
    assert np.array_equal(back[0], array) and np.array_equal(back[1], array[:1])


def test_a_frame_writer_writes_the_protocols_bytes_whatever_is_rebound_after(monkeypatch) -> None:
    # Made first, then the module's json, os and write_frame are rebound to drop everything: the writer's
    # frames are still byte for byte the protocol's, built here from json.dumps and the struct layouts (NaN,
    # infinities, non-ASCII text, small buffers joined to the header, a large one on its own).
    header = {"event": {"kind": "gather_trap", "detail": "é\u2028"}, "x": [1, 2.5, float("nan"), float("inf"),
                                                                        -float("inf"), None, True, 10**20]}
    buffers = [np.arange(10, dtype=np.float32).tobytes(), bytearray(b"x" * (1 << 17))]
    text = json.dumps(header, allow_nan=True, separators=(",", ":")).encode()
    expected = (wire.PREFIX.pack(wire.MAGIC, len(text), len(buffers))
                + b"".join(wire.BUFFER_LENGTH.pack(len(buffer)) for buffer in buffers) + text + b"".join(buffers))  # fmt: skip
    assert expected == b"".join(bytes(piece) for piece in wire.encode_frame(header, buffers))
    read_fd, write_fd = os.pipe()
    writer = wire.frame_writer(write_fd)
    # The module's own names, not the process's: the test process's os.write and json carry pytest's output.
    monkeypatch.setattr(wire, "json", SimpleNamespace(dumps=lambda *args, **kwargs: "{}"))
    monkeypatch.setattr(wire, "os", SimpleNamespace(write=lambda fd, data: len(data)))
    monkeypatch.setattr(wire, "write_frame", lambda *args, **kwargs: None)
    got = bytearray()

    def drain() -> None:
        while len(got) < len(expected):
            got.extend(os.read(read_fd, 1 << 20))

    reader = threading.Thread(target=drain)
    reader.start()
    writer(header, buffers)
    reader.join(timeout=30)
    os.close(read_fd)
    os.close(write_fd)
    assert bytes(got) == expected


def test_a_frame_is_read_on_a_descriptor_past_1023_and_its_deadline_still_holds() -> None:
    # A grader running many workers at once holds their pipes on descriptors of 1024 and up, which select()
    # refuses ("filedescriptor out of range").
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if max(soft, hard if hard != resource.RLIM_INFINITY else 4096) < 1400:
        pytest.skip("this process may not open descriptors past 1400")
    if soft < 1400:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1400, hard))
    read, write = os.pipe()
    high_read, high_write = os.dup2(read, 1300), os.dup2(write, 1301)
    os.close(read)
    os.close(write)
    try:
        reader = wire.FrameReader(high_read)
        with pytest.raises(wire.FrameTimeout):
            reader.read(time.monotonic() + 0.05)
        wire.write_frame(high_write, {"v": 7}, [b"abc"])
        header, buffers = reader.read(time.monotonic() + 5)
        assert header == {"v": 7} and bytes(buffers[0]) == b"abc"
        assert not wire.readable(high_read, 0)
        os.close(high_write)
        assert wire.readable(high_read, 0), "a closed pipe reads as its end"
    finally:
        os.close(high_read)
        if soft < 1400:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_workers_writer_numbers_its_frames_and_holds_them_while_its_pipe_is_swapped() -> None:
    # Where no seccomp filter keeps the reply descriptor in place, a submission could put a pipe of its own under
    # its number (dup2) while reports are written, and the real one back after (red team: a gather's report went
    # into the submission's pipe). The worker's writer writes only to the pipe it was made for: meanwhile it holds
    # its frames, then writes a pipe_swap report and them, in order and numbered, once the pipe is back.
    read_fd, write_fd = os.pipe()
    sink_r, sink_w = os.pipe()
    saved = os.dup(write_fd)
    writer = wire.frame_writer(write_fd, checked=True)
    reader = wire.FrameReader(read_fd)
    try:
        writer({"op": "armed"})
        assert reader.read(time.monotonic() + 5) == ({"op": "armed", wire.SEQ: 0}, [])
        os.dup2(sink_w, write_fd)
        writer({"event": {"kind": "gather_trap"}})
        assert not wire.readable(sink_r, 0) and not wire.readable(read_fd, 0)
        os.dup2(saved, write_fd)
        writer({"ok": 1}, [b"abc"])
        frames = [reader.read(time.monotonic() + 5) for _ in range(3)]
        assert [header for header, _ in frames] == [
            {"event": {"kind": wire.PIPE_SWAP, "detail": "another file was put under the worker's reply descriptor"},
             wire.SEQ: 1},
            {"event": {"kind": "gather_trap"}, wire.SEQ: 2},
            {"ok": 1, wire.SEQ: 3},
        ]
        assert bytes(frames[2][1][0]) == b"abc" and not wire.readable(read_fd, 0)
    finally:
        for fd in (read_fd, write_fd, sink_r, sink_w, saved):
            os.close(fd)
