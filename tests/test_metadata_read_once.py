"""calls.read_once: a subject's metadata is read once per field, and its array fields must be arrays, so a check
and the subject's attention always see the same pages."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from pagecheck.invariants.calls import read_once


class CountingMetadata:
    def __init__(self) -> None:
        self.reads: dict[str, int] = {}

    def __getattr__(self, name: str) -> object:
        if name not in ("key_pages", "value_pages", "block_table", "context_lens", "page_size"):
            raise AttributeError(name)
        self.reads[name] = self.reads.get(name, 0) + 1
        return 4 if name == "page_size" else mx.zeros((1, 2, 4, 4)) + self.reads[name]


def test_each_field_is_read_once_and_a_missing_one_stays_missing() -> None:
    metadata = CountingMetadata()
    held = read_once(metadata)
    first = held.key_pages
    assert held.key_pages is first and held.page_size == 4
    assert metadata.reads == {name: 1 for name in ("key_pages", "value_pages", "block_table", "context_lens", "page_size")}
    assert not hasattr(held, "mask")  # the course reads metadata.mask: one that lacks it fails where it is read


class PagesObject:
    """Iterates as pages, but is none: a check reading it with np.asarray would get other pages than an attention
    that knows the object."""

    shape = (1, 2, 4, 4)

    def __iter__(self):
        return iter(np.ones(self.shape, np.float32))


@pytest.mark.parametrize("field", ["key_pages", "value_pages"])
def test_pages_that_are_no_array_are_refused(field: str) -> None:
    fields = {"key_pages": mx.zeros((1, 2, 4, 4)), "value_pages": np.zeros((1, 2, 4, 4), np.float32),
              "block_table": mx.array([[0]]), "context_lens": mx.array([3]), "page_size": 4, "mask": "causal"}
    assert read_once(type("Metadata", (), fields)()).mask == "causal"
    fields[field] = PagesObject()
    with pytest.raises(TypeError, match=f"metadata.{field} is a PagesObject, not an array"):
        read_once(type("Metadata", (), fields)())


class HostTable(list):
    """A table of the subject's own with the .shape and .tolist() the course reads; a second read answers
    otherwise."""

    reads = 0

    @property
    def shape(self) -> tuple[int, ...]:
        return (len(self), len(self[0]))

    def tolist(self) -> list:
        HostTable.reads += 1
        return [list(row) for row in self] if HostTable.reads == 1 else [[9] * len(row) for row in self]


@pytest.mark.parametrize("field", ["block_table", "context_lens"])
def test_a_table_that_is_no_array_is_read_once_into_one_the_attention_gets_too(field: str) -> None:
    """A block table kept as a list subclass with .shape and .tolist() passes the course, which reads only those:
    the suite refused it as no array (course clauses failed). It is read once, through tolist(), into an MLX int32
    array, which the check and the subject's attention both get."""
    HostTable.reads = 0
    fields = {"key_pages": mx.zeros((1, 2, 4, 4)), "value_pages": np.zeros((1, 2, 4, 4), np.float32),
              "block_table": mx.array([[0]]), "context_lens": mx.array([3]), "page_size": 4, "mask": "causal"}
    fields[field] = HostTable([[0, -1]] if field == "block_table" else [[3]])
    held = read_once(type("Metadata", (), fields)())
    table = getattr(held, field)
    assert isinstance(table, mx.array) and table.dtype == mx.int32 and HostTable.reads == 1
    assert table.tolist() == ([[0, -1]] if field == "block_table" else [[3]])
    assert getattr(held, field) is table  # the same array for every later reader
    fields[field] = PagesObject()  # iterates as float pages: no table of integers
    with pytest.raises(TypeError, match=f"metadata.{field} is a PagesObject whose values are no array of integers"):
        read_once(type("Metadata", (), fields)())
    fields[field] = [[3.0, -1.0]]  # whole floats: the ints they equal, as the course's == takes them
    assert getattr(read_once(type("Metadata", (), fields)()), field).tolist() == [[3, -1]]
    fields[field] = [[3.5]]
    with pytest.raises(TypeError, match=f"metadata.{field} is a list whose values are no array of integers \\(its values are float64"):
        read_once(type("Metadata", (), fields)())
    fields[field] = [[2**31]]
    with pytest.raises(TypeError, match=f"metadata.{field} is a list whose values .* pass int32"):
        read_once(type("Metadata", (), fields)())
    fields[field] = [[0, [1]]]
    with pytest.raises(TypeError, match=f"metadata.{field} is a list whose values are no array of integers"):
        read_once(type("Metadata", (), fields)())


SANDBOXED_HANDLE = """
import mlx.core as mx
import numpy as np


class _Pages:
    shape = (1, 2, 4, 4)

    def __iter__(self):
        return iter(np.ones(self.shape, np.float32))


class Metadata:
    def __init__(self):
        self.key_pages, self.value_pages = _Pages(), mx.zeros((1, 2, 4, 4))
        self.block_table, self.context_lens, self.page_size, self.mask = mx.array([[0]]), mx.array([3]), 4, None


class TinyKvPagedCache:
    def __init__(self, pool=None):
        self.pool = pool

    def update_and_fetch_paged(self, key, value, mask_length=None, mask=None):
        return Metadata()
"""


def test_a_sandboxed_subjects_object_pages_are_refused(tmp_path: Path) -> None:
    """Through the sandbox an object comes back as a proxy, which np.asarray iterated in the worker: a check read
    the pages the object chose (a red-team submission kept a course clause this way)."""
    from tests.test_grading_worker import sandboxed

    with sandboxed(tmp_path, "handle.py", SANDBOXED_HANDLE) as (subject, session):
        session.begin_check("object-pages")
        metadata = subject.get("TinyKvPagedCache")().update_and_fetch_paged(None, None)
        with pytest.raises(TypeError, match="metadata.key_pages is a .*, not an array"):
            read_once(metadata)


def test_a_pools_pages_that_are_no_array_are_refused_and_a_table_is_read_once() -> None:
    """current_metadata hands the pool's pages and the cache's table to the subject's attention and to the check:
    pages must be arrays, and a table that is not one is read once into an MLX array (a proxy iterated again
    could answer differently)."""
    from pagecheck.invariants.calls import current_metadata

    class Cache:
        offset = 3
        reads = 0

        def block_table(self):
            Cache.reads += 1
            return [0]

    pool = type("Pool", (), {"key_pages": mx.zeros((1, 2, 4, 4)), "value_pages": mx.zeros((1, 2, 4, 4))})()
    metadata = current_metadata(pool, Cache(), 4)
    assert isinstance(metadata.block_table, mx.array) and metadata.block_table.tolist() == [[0]] and Cache.reads == 1
    pool.value_pages = PagesObject()
    with pytest.raises(TypeError, match="pool.value_pages is a PagesObject, not an array"):
        current_metadata(pool, Cache(), 4)
