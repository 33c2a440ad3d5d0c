"""TinyKvPagedPool: one layer's page allocator and its contiguous K/V page storage, in MLX.

Storage. One backing array per pool for keys and one for values, each
[capacity, H_kv, page_size, D], created by the first write from that write's
H_kv, D and dtype. `key_pages` / `value_pages` show only the rows issued so far
([:num_pages]); `capacity` is the row count. Rows added to storage (on creation
and on growth) are filled with NaN, so a kernel that reads a slot nobody wrote
returns NaN instead of a plausible number. A freed page keeps its old contents
until it is written again.

Allocation. `allocate_page` reuses the most recently freed id (LIFO); with
none free it issues a fresh id equal to the number of pages ever issued. When
a fresh id does not fit, storage grows to max(4, num_pages, 2 * capacity) rows
and the old rows are copied; creation counts as a growth that copies nothing.

Writes are lazy MLX graph updates (see impl/page_write.py). A write copies only
the written rows as long as nothing else holds the storage when it is
evaluated; a caller that keeps `key_pages`, `read_page` results or old
metadata alive across the next append makes that append copy the whole pool.

Every rejected call raises ValueError naming the field and the bad value, and
leaves the pool exactly as it was. That includes storage MLX could not hold:
creation or growth whose K and V (with the old rows while they are copied)
would pass MLX's memory limit (`mx.get_memory_limit()`) is refused before any
array is made, as MLX ends the process when an allocation fails.
`checkpoint` / `rollback` let a caller undo a sequence of allocations and
writes as one step.
"""

from __future__ import annotations

import reprlib
from typing import Any, NamedTuple, Optional

import mlx.core as mx

from pagecheck.impl import page_write
from pagecheck.reference.pool import SUPPORTED_DTYPES

MIN_CAPACITY = 4
SUPPORTED_MX_DTYPES = tuple(getattr(mx, name) for name in SUPPORTED_DTYPES)


def _dtype_label(dtype: mx.Dtype) -> str:
    return str(dtype).rsplit(".", 1)[-1]


# The free pages as a persistent stack: (page id, the rest) pairs ending in None, the next page handed out on
# top. A pop or a push makes one pair and never changes an old one, so a checkpoint keeps the stack itself
# (O(1)): every layer's append takes a checkpoint at every decode step, and a copy of a list of thousands of
# freed pages there cost microseconds a layer (ext/kernels/NOTES.md v23 item 8).
FreeStack = Optional[tuple[int, "FreeStack"]]


def _stack_ids(stack: FreeStack) -> list[int]:
    """The stack's page ids, bottom first: the last one is handed out next."""
    ids = []
    while stack is not None:
        page_id, stack = stack
        ids.append(page_id)
    ids.reverse()
    return ids


class PoolCheckpoint(NamedTuple):
    """Everything `rollback` needs to put a pool back; storage arrays are shared, not copied.
    (A NamedTuple: immutable like a frozen dataclass, and several times cheaper to build, which
    matters because every append takes one.)"""

    keys: mx.array | None
    values: mx.array | None
    num_pages: int
    free_pages: FreeStack
    num_free_pages: int
    reused_page_allocations: int
    storage_growths: int
    copied_pages_on_growth: int
    copied_bytes_on_growth: int


class TinyKvPagedPool:
    def __init__(self, page_size: int = 128) -> None:
        if not is_int(page_size) or page_size <= 0:
            raise ValueError(f"page_size={page_size!r} must be a positive integer{python_int_hint(page_size)}")
        self.page_size = page_size
        self._init_state()

    def _init_state(self) -> None:
        self._keys: mx.array | None = None
        self._values: mx.array | None = None
        self._num_pages = 0
        self._free: FreeStack = None
        self._num_free = 0
        self._free_set: set[int] = set()
        self.reused_page_allocations = 0
        self.storage_growths = 0
        self.copied_pages_on_growth = 0
        self.copied_bytes_on_growth = 0

    # -- counts -----------------------------------------------------------
    @property
    def num_pages(self) -> int:
        """Pages ever issued (live + free)."""
        return self._num_pages

    @property
    def num_free_pages(self) -> int:
        return self._num_free

    @property
    def free_page_ids(self) -> list[int]:
        """Free ids in reuse order reversed: the last one is handed out next."""
        return _stack_ids(self._free)

    @property
    def used_page_ids(self) -> list[int]:
        return [page_id for page_id in range(self._num_pages) if page_id not in self._free_set]

    @property
    def capacity(self) -> int:
        return 0 if self._keys is None else self._keys.shape[0]

    @property
    def storage_nbytes(self) -> int:
        return 0 if self._keys is None or self._values is None else self._keys.nbytes + self._values.nbytes

    @property
    def dtype(self) -> mx.Dtype | None:
        return None if self._keys is None else self._keys.dtype

    @property
    def key_pages(self) -> mx.array | None:
        return None if self._keys is None else self._keys[: self._num_pages]

    @property
    def value_pages(self) -> mx.array | None:
        return None if self._values is None else self._values[: self._num_pages]

    @property
    def storage(self) -> tuple[mx.array, mx.array] | None:
        """(keys, values): the whole backing arrays, [capacity, H_kv, page_size, D] each (rows past
        num_pages are NaN), or None before the first write. Every issued page id indexes them as it
        indexes key_pages / value_pages, without the slice those make."""
        if self._keys is None or self._values is None:
            return None
        return self._keys, self._values

    # -- allocation ---------------------------------------------------------
    def allocate_page(self) -> int:
        if self._free is not None:
            page_id, self._free = self._free
            self._num_free -= 1
            self._free_set.remove(page_id)
            self.reused_page_allocations += 1
            return page_id
        page_id = self._num_pages
        if self._keys is not None and self._values is not None and page_id >= self._keys.shape[0]:
            self._grow(self._keys, self._values, _grown_rows(self._keys.shape[0], page_id))
        self._num_pages += 1
        return page_id

    def check_room_for(self, pages: int) -> None:
        """ValueError, changing nothing, when `pages` more allocations could not be stored: the fresh ids
        among them (beyond the free ones) would grow storage, doubling as allocate_page does, past MLX's
        memory limit. Before the first write there is no storage to size, so nothing is checked. `pages` must
        be an int >= 0."""
        if not is_int(pages) or pages < 0:
            raise ValueError(f"pages={pages!r} must be an int >= 0{python_int_hint(pages)}")
        fresh = pages - self._num_free
        if fresh <= 0 or self._keys is None or self._values is None:
            return
        rows, total = self._keys.shape[0], self._num_pages + fresh
        if total <= rows:
            return
        held = rows
        while rows < total:
            held, rows = rows, _grown_rows(rows, rows)
        page_bytes = (self._keys.nbytes + self._values.nbytes) // self._keys.shape[0]
        self._check_storage_fits((rows, *self._keys.shape[1:]), self._keys.dtype, held * page_bytes)

    def free_page(self, page_id: int) -> None:
        self._check_issued(page_id)
        if page_id in self._free_set:
            raise ValueError(f"Page {page_id} is already free")
        self._free = (page_id, self._free)
        self._num_free += 1
        self._free_set.add(page_id)

    def unheld_page(self) -> int | None:
        """A storage row no live cache holds, for a write whose values nothing will read: the free page
        handed out next, else the first row past the issued pages; None when storage has neither."""
        if self._free is not None:
            return self._free[0]
        return self._num_pages if self._num_pages < self.capacity else None

    def is_live(self, page_id: int) -> bool:
        """True for an id this pool issued and has not taken back."""
        return is_int(page_id) and 0 <= page_id < self._num_pages and page_id not in self._free_set

    def reset(self) -> None:
        """Drop storage, ids and counters; refused while any page is live."""
        live = self.used_page_ids
        if live:
            raise ValueError(f"cannot reset the pool: pages {live} are still live")
        self._init_state()

    # -- data ---------------------------------------------------------------
    def check_chunk(self, key: mx.array, value: mx.array) -> None:
        """Reject a K/V chunk that this pool could not store; changes nothing."""
        check_kv_pair(key, value)
        self.check_chunk_shape(tuple(key.shape), key.dtype, value.dtype)

    def check_chunk_shape(self, shape: tuple[int, ...], dtype: mx.Dtype, value_dtype: mx.Dtype) -> None:
        """check_chunk's checks on a chunk's shape [1, H_kv, S, D] and the key and value dtypes."""
        if not isinstance(shape, (tuple, list)) or len(shape) != 4 or shape[0] != 1:
            raise ValueError(f"key shape={shape} must be [1, H_kv, S, D]")
        _, num_heads, length, head_dim = shape
        if num_heads == 0 or head_dim == 0:
            raise ValueError(f"key shape={shape} needs H_kv >= 1 and D >= 1")
        if length == 0:
            raise ValueError(f"key shape={shape} has S=0 tokens; a chunk needs S >= 1")
        if dtype not in SUPPORTED_MX_DTYPES:
            raise ValueError(f"key dtype={_dtype_label(dtype)} is not one of {SUPPORTED_DTYPES}")
        if value_dtype != dtype:
            raise ValueError(
                f"value dtype={_dtype_label(value_dtype)} differs from key dtype={_dtype_label(dtype)}"
            )
        if self._keys is not None:
            _, storage_heads, _, storage_dim = self._keys.shape
            if (num_heads, head_dim) != (storage_heads, storage_dim):
                raise ValueError(
                    f"key shape={shape} does not match the existing page storage "
                    f"[*, H_kv={storage_heads}, *, D={storage_dim}]"
                )
            if dtype != self._keys.dtype:
                raise ValueError(
                    f"key dtype={_dtype_label(dtype)} does not match the existing page storage "
                    f"dtype {_dtype_label(self._keys.dtype)}"
                )

    def write_page_slice(self, page_id: int, start: int, key: mx.array, value: mx.array) -> None:
        """Write key/value [1, H_kv, S, D] into slots start..start+S of one live page."""
        self.check_chunk(key, value)
        self._check_live(page_id)
        length = key.shape[2]
        self._check_slot(start)
        if start + length > self.page_size:
            raise ValueError(
                f"key length S={length} at start={start} runs past the end of a page of size {self.page_size}"
            )
        before = self.checkpoint()
        try:
            if self._keys is None or self._values is None:
                self._create_storage(key)
            keys = page_write.write_page_rows(self._keys, page_id, start, key[0])
            values = page_write.write_page_rows(self._values, page_id, start, value[0])
        except BaseException:
            self.rollback(before)
            raise
        self._keys, self._values = keys, values

    def write_token_rows(self, page_ids: list[int], slots: list[int], keys: mx.array, values: mx.array) -> None:
        """Write keys and values [R, H_kv, T, D] (R rows of T tokens each, as K/V come: a decode step's
        [B, H_kv, 1, D], a prefill chunk's [1, H_kv, L, D]) in one storage update: token t of row r goes to
        slot slots[r * T + t] of live page page_ids[r * T + t]."""
        check_kv_pair(keys, values)
        index = self.token_rows_index(page_ids, slots, tuple(keys.shape), keys.dtype, values.dtype)
        # Only creating the storage changes the pool before both updates are built, so only then is there
        # anything to roll back.
        before = self.checkpoint() if self._keys is None or self._values is None else None
        try:
            if before is not None:
                self._create_storage(keys)  # its shape [R, H_kv, T, D] gives H_kv and D
            new_keys = page_write.write_token_rows(self._keys, index, keys)
            new_values = page_write.write_token_rows(self._values, index, values)
        except BaseException:
            if before is not None:
                self.rollback(before)
            raise
        self._keys, self._values = new_keys, new_values

    def token_rows_index(
        self, page_ids: list[int], slots: list[int], shape: tuple[int, ...], dtype: mx.Dtype, value_dtype: mx.Dtype
    ) -> page_write.TokenRowIndex:
        """write_token_rows' checks of rows shaped `shape` [R, H_kv, T, D] with these key and value dtypes at
        these positions (check_token_rows), then the storage index they go to (page_write.token_row_index).
        Changes nothing: a caller that builds the write itself (serving's compiled step, serving/paged_step.py)
        hands its result to replace_storage."""
        self.check_token_rows(page_ids, slots, shape, dtype, value_dtype)
        return page_write.token_row_index(tuple(page_ids), tuple(slots), shape[1], shape[2])

    def check_token_rows(
        self, page_ids: list[int], slots: list[int], shape: tuple[int, ...], dtype: mx.Dtype, value_dtype: mx.Dtype
    ) -> None:
        """token_rows_index's checks alone, for a caller that writes these rows at an index of its own making
        (a decode step whose empty slots' rows go elsewhere, serving/step_batching_cache.py). page_ids and
        slots are lists (or tuples) of Python ints, shape a tuple (or list)."""
        if not (isinstance(page_ids, (list, tuple)) and isinstance(slots, (list, tuple))
                and isinstance(shape, (list, tuple))):  # one test on the decode path, which passes lists
            for name, given in (("page_ids", page_ids), ("slots", slots), ("shape", shape)):
                if not isinstance(given, (list, tuple)):
                    raise ValueError(f"{name}={reprlib.repr(given)} must be a list or tuple, got {type_label(given)}")
        if (len(shape) != 4 or shape[0] * shape[2] != len(page_ids) or len(slots) != len(page_ids)
                or not page_ids):
            raise ValueError(
                f"keys shape={tuple(shape)} must be [R, H_kv, T, D] with R * T = len(page_ids)={len(page_ids)} "
                f"= len(slots)={len(slots)} >= 1"
            )
        # The checks of a one-token chunk [1, H_kv, 1, D] (the rows' geometry), without slicing them out.
        self.check_chunk_shape((1, shape[1], 1, shape[3]), dtype, value_dtype)
        self._check_token_positions(page_ids, slots)

    def replace_storage(self, keys: mx.array, values: mx.array) -> None:
        """Take `keys` / `values` as the storage: the result of a write built over the current storage
        (page_write.write_token_rows at an index token_rows_index gave), so of the same shape and dtype."""
        storage = self.storage
        if storage is None:
            raise ValueError("replace_storage: the pool has no page storage to replace")
        check_kv_pair(keys, values, ("keys", "values"))
        for name, new, old in (("keys", keys, storage[0]), ("values", values, storage[1])):
            if new.shape != old.shape or new.dtype != old.dtype:
                raise ValueError(
                    f"{name} shape={tuple(new.shape)} dtype={_dtype_label(new.dtype)} must match the storage it "
                    f"replaces, shape={tuple(old.shape)} dtype={_dtype_label(old.dtype)}"
                )
        self._keys, self._values = keys, values

    def _check_token_positions(self, page_ids: list[int], slots: list[int]) -> None:
        """Every page id live, every slot inside a page, no position named twice. A decode step writes one
        token per request in every layer, so the common case (plain ints, all valid) is checked with
        built-ins over the whole lists; anything else takes the loops that name the bad value."""
        plain = all(type(page_id) is int for page_id in page_ids) and all(type(slot) is int for slot in slots)
        if not (
            plain
            and 0 <= min(page_ids) and max(page_ids) < self._num_pages and self._free_set.isdisjoint(page_ids)
            and 0 <= min(slots) and max(slots) < self.page_size
        ):
            for page_id in page_ids:
                self._check_live(page_id)
            for start in slots:
                self._check_slot(start)
        if len(set(zip(page_ids, slots))) != len(page_ids):
            raise ValueError(f"page_ids={page_ids} and slots={slots} name one position twice")

    def read_page(self, page_id: int) -> tuple[mx.array, mx.array]:
        """(key, value) of one live page, each [1, H_kv, page_size, D], unwritten slots NaN."""
        self._check_live(page_id)
        if self._keys is None or self._values is None:
            raise ValueError(f"page_id={page_id} has no storage yet: nothing was written to this pool")
        return self._keys[page_id : page_id + 1], self._values[page_id : page_id + 1]

    def materialize(self) -> None:
        """Evaluate pending writes into storage (no gather, no copy of the pages)."""
        if self._keys is not None:
            mx.eval(self.key_pages, self.value_pages)

    # -- undo -----------------------------------------------------------------
    def checkpoint(self) -> PoolCheckpoint:
        return PoolCheckpoint(
            keys=self._keys,
            values=self._values,
            num_pages=self._num_pages,
            free_pages=self._free,
            num_free_pages=self._num_free,
            reused_page_allocations=self.reused_page_allocations,
            storage_growths=self.storage_growths,
            copied_pages_on_growth=self.copied_pages_on_growth,
            copied_bytes_on_growth=self.copied_bytes_on_growth,
        )

    def rollback(self, checkpoint: PoolCheckpoint) -> None:
        """Put the pool back as it was at `checkpoint`, page data included.

        Writes since the checkpoint are graph nodes over the old arrays, so
        taking the old arrays back discards them without copying anything.
        `checkpoint` must be a PoolCheckpoint (what `checkpoint()` returns).
        """
        if not isinstance(checkpoint, PoolCheckpoint):
            raise ValueError(
                f"checkpoint={reprlib.repr(checkpoint)} must be a PoolCheckpoint from checkpoint(), "
                f"got {type_label(checkpoint)}"
            )
        self._keys = checkpoint.keys
        self._values = checkpoint.values
        self._num_pages = checkpoint.num_pages
        if checkpoint.free_pages is not self._free:
            self._free = checkpoint.free_pages
            self._num_free = checkpoint.num_free_pages
            self._free_set = set(_stack_ids(self._free))
        self.reused_page_allocations = checkpoint.reused_page_allocations
        self.storage_growths = checkpoint.storage_growths
        self.copied_pages_on_growth = checkpoint.copied_pages_on_growth
        self.copied_bytes_on_growth = checkpoint.copied_bytes_on_growth

    def check_live_pages(self, page_ids: list[int], owner: str) -> None:
        """ValueError naming `owner` and the page, unless every id is a live (issued, not free) page."""
        if not isinstance(page_ids, (list, tuple)):
            raise ValueError(f"page_ids={reprlib.repr(page_ids)} of {owner} must be a list or tuple, "
                             f"got {type_label(page_ids)}")
        for page_id in page_ids:
            if not is_int(page_id):
                raise ValueError(f"{owner} holds page_id={reprlib.repr(page_id)}, which is not a page id"
                                 f"{python_int_hint(page_id)}")
            if page_id in self._free_set:
                raise ValueError(f"{owner} holds page_id={page_id}, which is free: it was freed behind its back")

    # -- internals ------------------------------------------------------------
    def _check_issued(self, page_id: int) -> None:
        """ValueError unless `page_id` is an id this pool issued: a Python int (the type allocate_page hands
        out; a NumPy integer or a float is named as the wrong type) in [0, num_pages)."""
        if not isinstance(page_id, int):
            raise ValueError(f"page_id={reprlib.repr(page_id)} must be a Python int, the type of the ids this pool "
                             f"issues; got {type_label(page_id)}")
        if isinstance(page_id, bool) or not 0 <= page_id < self._num_pages:
            raise ValueError(f"page_id={page_id!r} was never issued by this pool ({self._num_pages} issued)")

    def _check_live(self, page_id: int) -> None:
        self._check_issued(page_id)
        if page_id in self._free_set:
            raise ValueError(f"page_id={page_id} is free; only a live page can be written or read")

    def _check_slot(self, start: Any) -> None:
        """ValueError unless `start` is a slot of a page: a Python int in [0, page_size)."""
        if not is_int(start) or not 0 <= start < self.page_size:
            raise ValueError(
                f"start={reprlib.repr(start)} is outside a page of size {self.page_size}{python_int_hint(start)}"
            )

    def _check_storage_fits(self, shape: tuple[int, ...], dtype: mx.Dtype, held_bytes: int) -> None:
        """K and V storage of `shape` each, beside `held_bytes` already held, within MLX's memory limit."""
        needed = 2 * dtype.size
        for extent in shape:
            needed *= extent
        limit = mx.get_memory_limit()
        if needed + held_bytes > limit:
            rows, heads, _, dim = shape
            raise ValueError(
                f"page_size={self.page_size}: K and V storage of {rows} pages [{rows}, H_kv={heads}, "
                f"{self.page_size}, D={dim}] {_dtype_label(dtype)} needs {needed + held_bytes} bytes"
                + (f" ({held_bytes} of them the old rows being copied)" if held_bytes else "")
                + f", above MLX's memory limit of {limit} bytes (mx.get_memory_limit())"
            )

    def _create_storage(self, like: mx.array) -> None:
        """First write: storage shaped by the chunk, rows for every page issued so far (at least 4)."""
        shape = (max(MIN_CAPACITY, self._num_pages), like.shape[1], self.page_size, like.shape[3])
        self._check_storage_fits(shape, like.dtype, 0)
        self._keys = _nan_rows(shape, like.dtype)
        self._values = _nan_rows(shape, like.dtype)
        self.storage_growths += 1

    def _grow(self, keys: mx.array, values: mx.array, rows: int) -> None:
        """Replace storage by `rows` rows: the old rows copied, the new ones NaN."""
        copied_pages = keys.shape[0]
        self._check_storage_fits((rows, *keys.shape[1:]), keys.dtype, keys.nbytes + values.nbytes)
        fill_shape = (rows - copied_pages, *keys.shape[1:])
        self._keys = mx.concatenate([keys, _nan_rows(fill_shape, keys.dtype)], axis=0)
        self._values = mx.concatenate([values, _nan_rows(fill_shape, values.dtype)], axis=0)
        self.storage_growths += 1
        self.copied_pages_on_growth += copied_pages
        self.copied_bytes_on_growth += keys.nbytes + values.nbytes


def _grown_rows(rows: int, page_id: int) -> int:
    """Storage rows after growing `rows` rows to hold `page_id`: doubled, at least 4 and at least page_id + 1."""
    return max(MIN_CAPACITY, page_id + 1, 2 * rows)


def _nan_rows(shape: tuple[int, ...], dtype: mx.Dtype) -> mx.array:
    return mx.full(shape, float("nan"), dtype=dtype)


def check_kv_pair(key: Any, value: Any, names: tuple[str, str] = ("key", "value")) -> None:
    """Both must be mlx arrays of one shape; `names` are the caller's argument names."""
    for name, array in zip(names, (key, value)):
        if not isinstance(array, mx.array):
            raise ValueError(f"{name} must be an mlx.core.array, got {type(array).__name__}")
    if value.shape != key.shape:
        raise ValueError(
            f"{names[0]} and {names[1]} must have the same shape: {names[0]} shape={tuple(key.shape)}, "
            f"{names[1]} shape={tuple(value.shape)}"
        )


def is_int(x: object) -> bool:
    """An int that is not a bool (True would otherwise pass as page 1)."""
    return isinstance(x, int) and not isinstance(x, bool)


def type_label(x: object) -> str:
    """The type of `x` as a message names it: `list`, `numpy.int64`."""
    kind = type(x)
    return kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"


def python_int_hint(x: object) -> str:
    """For a message about an int argument: empty when `x` is a Python int, else what it is instead, so a
    NumPy integer or a bool inside the range is not reported as out of range alone."""
    return "" if is_int(x) else f" (it must be a Python int; got {type_label(x)})"
