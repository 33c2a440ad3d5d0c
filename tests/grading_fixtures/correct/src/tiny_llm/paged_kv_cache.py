"""A page pool (one per layer) and a paged KV cache per request, on MLX storage.

The pool hands out page ids (the most recently freed first, else a fresh one),
takes them back once each, and stores pages [capacity, H_kv, page_size, D]
for keys and values, created by the first write and doubled as needed. The
cache appends into its tail page and takes a new page only when the tail is
full. Every call checks its inputs before it changes anything.
"""

from dataclasses import dataclass

import mlx.core as mx

SUPPORTED_DTYPES = ("float32", "float16", "bfloat16")
MIN_CAPACITY = 4


@dataclass(frozen=True)
class PagedKvMetadata:
    key_pages: mx.array
    value_pages: mx.array
    block_table: mx.array
    context_lens: mx.array
    page_size: int
    mask: object = None


def _dtype_name(x) -> str:
    return str(getattr(x, "dtype", "")).rsplit(".", 1)[-1]


class TinyKvPagedPool:
    def __init__(self, page_size: int = 128) -> None:
        if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size <= 0:
            raise ValueError(f"page_size must be a positive int, got {page_size!r}")
        self.page_size = page_size
        self._keys = None
        self._values = None
        self._issued = 0
        self._free = []

    @property
    def num_pages(self) -> int:
        return self._issued

    @property
    def num_free_pages(self) -> int:
        return len(self._free)

    @property
    def free_page_ids(self) -> list:
        return list(self._free)

    @property
    def used_page_ids(self) -> list:
        free = set(self._free)
        return [page for page in range(self._issued) if page not in free]

    @property
    def key_pages(self):
        return None if self._keys is None else self._keys[: self._issued]

    @property
    def value_pages(self):
        return None if self._values is None else self._values[: self._issued]

    def allocate_page(self) -> int:
        if self._free:
            return self._free.pop()
        page = self._issued
        self._issued += 1
        if self._keys is not None and page >= self._keys.shape[0]:
            self._grow(page + 1)
        return page

    def free_page(self, page_id: int) -> None:
        self._check_issued(page_id)
        if page_id in self._free:
            raise ValueError(f"Page {page_id} is already free")
        self._free.append(int(page_id))

    def check_chunk(self, key, value) -> None:
        """Raise ValueError unless key and value are one [1, H_kv, S, D] chunk this pool can store."""
        dtype = _dtype_name(key)
        if dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"key dtype={dtype!r} is not one of {SUPPORTED_DTYPES}")
        if _dtype_name(value) != dtype:
            raise ValueError(f"value dtype={_dtype_name(value)!r} differs from key dtype={dtype!r}")
        if len(key.shape) != 4 or key.shape[0] != 1:
            raise ValueError(f"key shape={tuple(key.shape)} must be [1, H_kv, S, D]")
        if tuple(value.shape) != tuple(key.shape):
            raise ValueError(f"value shape={tuple(value.shape)} differs from key shape={tuple(key.shape)}")
        if self._keys is not None:
            _, heads, _, dim = self._keys.shape
            if (key.shape[1], key.shape[3]) != (heads, dim):
                raise ValueError(f"key shape={tuple(key.shape)} does not match pool pages [*, {heads}, *, {dim}]")
            if dtype != _dtype_name(self._keys):
                raise ValueError(f"key dtype={dtype!r} does not match the pool dtype={_dtype_name(self._keys)!r}")

    def write_page_slice(self, page_id: int, start: int, key, value) -> None:
        self.check_chunk(key, value)
        self._check_live(page_id)
        length = key.shape[2]
        if not 0 <= start < self.page_size:
            raise ValueError(f"start={start} is outside a page of size {self.page_size}")
        if start + length > self.page_size:
            raise ValueError(f"write of {length} tokens at start={start} runs past the page end ({self.page_size})")
        if self._keys is None:
            shape = (max(MIN_CAPACITY, self._issued), key.shape[1], self.page_size, key.shape[3])
            self._keys = mx.zeros(shape, dtype=key.dtype)
            self._values = mx.zeros(shape, dtype=key.dtype)
        self._keys[page_id, :, start : start + length] = key[0]
        self._values[page_id, :, start : start + length] = value[0]

    def read_page(self, page_id: int):
        """A live page's keys and values, [1, H_kv, page_size, D] each."""
        self._check_live(page_id)
        if self._keys is None:
            raise ValueError(f"page_id={page_id} has no storage yet: nothing was written to this pool")
        return self._keys[page_id : page_id + 1], self._values[page_id : page_id + 1]

    def _grow(self, needed: int) -> None:
        capacity = self._keys.shape[0]
        extra = max(MIN_CAPACITY, needed, 2 * capacity) - capacity
        padding = mx.zeros((extra, *self._keys.shape[1:]), dtype=self._keys.dtype)
        self._keys = mx.concatenate([self._keys, padding])
        self._values = mx.concatenate([self._values, padding])

    def _check_issued(self, page_id) -> None:
        if isinstance(page_id, bool) or not isinstance(page_id, int) or not 0 <= page_id < self._issued:
            raise ValueError(f"page_id={page_id!r} was never issued by this pool ({self._issued} issued)")

    def _check_live(self, page_id) -> None:
        self._check_issued(page_id)
        if page_id in self._free:
            raise ValueError(f"page_id={page_id} is free; write or read a live page")


class TinyKvPagedCache:
    def __init__(self, pool: TinyKvPagedPool) -> None:
        self.pool = pool
        self.page_ids = []
        self.page_lens = []

    @property
    def offset(self) -> int:
        return sum(self.page_lens)

    @property
    def num_pages(self) -> int:
        return len(self.page_ids)

    def update_and_fetch_paged(self, key, value, mask_length=None, mask=None) -> PagedKvMetadata:
        self.append(key, value)
        return self.paged_metadata(mask)

    def update_and_fetch(self, key, value, mask_length=None, mask=None):
        """The dense view the course's tests also use: append, then this request's keys and values whole, its
        length and the mask."""
        self.append(key, value)
        keys, values = self.gather_dense()
        return keys, values, self.offset, mask

    def append(self, key, value) -> None:
        """Write a [1, H_kv, S, D] chunk into the tail page, then into new pages as each fills."""
        pool = self.pool
        pool.check_chunk(key, value)
        length = key.shape[2]
        written = 0
        while written < length:
            if not self.page_ids or self.page_lens[-1] == pool.page_size:
                self.page_ids.append(pool.allocate_page())
                self.page_lens.append(0)
            start = self.page_lens[-1]
            take = min(pool.page_size - start, length - written)
            pool.write_page_slice(self.page_ids[-1], start, key[:, :, written : written + take],
                                  value[:, :, written : written + take])
            self.page_lens[-1] += take
            written += take

    def block_table(self, max_pages=None) -> mx.array:
        width = self.num_pages if max_pages is None else max_pages
        if width < self.num_pages:
            raise ValueError(f"max_pages={max_pages} is smaller than the cache's {self.num_pages} pages")
        return mx.array([self.page_ids + [-1] * (width - self.num_pages)], dtype=mx.int32)

    def context_lens(self) -> mx.array:
        return mx.array([self.offset], dtype=mx.int32)

    def paged_metadata(self, mask=None) -> PagedKvMetadata:
        pool = self.pool
        return PagedKvMetadata(pool.key_pages, pool.value_pages, self.block_table(), self.context_lens(),
                               pool.page_size, mask)

    def gather_dense(self):
        """This request's keys and values in logical order, [1, H_kv, offset, D] each (for inspection)."""
        pool = self.pool
        if not self.page_ids:
            return None, None
        keys = mx.concatenate([pool.key_pages[p, :, :n] for p, n in zip(self.page_ids, self.page_lens)], axis=1)
        values = mx.concatenate([pool.value_pages[p, :, :n] for p, n in zip(self.page_ids, self.page_lens)], axis=1)
        return keys[None], values[None]

    def release(self) -> None:
        for page in self.page_ids:
            self.pool.free_page(page)
        self.page_ids, self.page_lens = [], []

    def rewind(self, n: int) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= self.offset:
            raise ValueError(f"rewind n={n!r} must be an int in [0, {self.offset}]")
        while n:
            dropped = min(n, self.page_lens[-1])
            self.page_lens[-1] -= dropped
            n -= dropped
            if self.page_lens[-1] == 0:
                self.pool.free_page(self.page_ids.pop())
                self.page_lens.pop()
