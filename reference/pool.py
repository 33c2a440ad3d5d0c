"""A page pool in plain Python with NumPy storage: the allocator contract, readable.

One pool serves one layer. It owns a backing store [capacity, H_kv, page_size, D]
for keys and one for values, hands out page ids, and takes them back.

Contract
- allocate_page(): reuse the most recently freed id (LIFO); with none free,
  issue a fresh id equal to the number of pages ever issued.
- free_page(id) of an id that is already free raises
  ValueError("Page {id} is already free").
- Storage is created by the first write and grows to max(4, pages needed,
  2 * capacity) rows, copying the rows already issued; creation counts as a
  growth that copies nothing, and copied pages/bytes are counted.
- Never-written slots hold NaN, so a kernel that reads one shows it.
- Any rejected call leaves the pool exactly as it was.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pagecheck.reference.arrays import to_numpy

SUPPORTED_DTYPES = ("float32", "float16", "bfloat16")


class TinyKvPagedPool:
    def __init__(self, page_size: int = 128) -> None:
        if not isinstance(page_size, int) or page_size <= 0:
            raise ValueError(f"page_size must be a positive int, got {page_size!r}")
        self.page_size = page_size
        self._keys: np.ndarray | None = None
        self._values: np.ndarray | None = None
        self.dtype: str | None = None
        self._num_issued = 0
        self._free: list[int] = []
        self.reused_page_allocations = 0
        self.storage_growths = 0
        self.copied_pages_on_growth = 0
        self.copied_bytes_on_growth = 0

    # -- counts ---------------------------------------------------------
    @property
    def num_pages(self) -> int:
        return self._num_issued

    @property
    def num_free_pages(self) -> int:
        return len(self._free)

    @property
    def free_page_ids(self) -> list[int]:
        return list(self._free)

    @property
    def used_page_ids(self) -> list[int]:
        free = set(self._free)
        return [i for i in range(self._num_issued) if i not in free]

    @property
    def capacity(self) -> int:
        return 0 if self._keys is None else self._keys.shape[0]

    @property
    def storage_nbytes(self) -> int:
        return 0 if self._keys is None else self._keys.nbytes + self._values.nbytes

    @property
    def key_pages(self) -> np.ndarray | None:
        return None if self._keys is None else self._keys[: self._num_issued]

    @property
    def value_pages(self) -> np.ndarray | None:
        return None if self._values is None else self._values[: self._num_issued]

    # -- allocation -----------------------------------------------------
    def allocate_page(self) -> int:
        if self._free:
            self.reused_page_allocations += 1
            return self._free.pop()
        page_id = self._num_issued
        self._num_issued += 1
        if self._keys is not None and page_id >= self.capacity:
            self._grow(page_id + 1)
        return page_id

    def free_page(self, page_id: int) -> None:
        self._check_issued(page_id)
        if page_id in self._free:
            raise ValueError(f"Page {page_id} is already free")
        self._free.append(page_id)

    def reset(self) -> None:
        live = self.used_page_ids
        if live:
            raise ValueError(f"cannot reset: pages {live} are still live")
        self.__init__(self.page_size)

    # -- data -----------------------------------------------------------
    def write_page_slice(self, page_id: int, start: int, key: Any, value: Any) -> None:
        k, v = self._check_chunk(key, value)
        self._check_live(page_id)
        length = k.shape[2]
        if not 0 <= start < self.page_size:
            raise ValueError(f"start={start} is outside a page of size {self.page_size}")
        if start + length > self.page_size:
            raise ValueError(
                f"write of {length} tokens at start={start} runs past the page end ({self.page_size})"
            )
        if self._keys is None:
            self._create_storage(k, max(4, self._num_issued))
        self._keys[page_id, :, start : start + length] = k[0]
        self._values[page_id, :, start : start + length] = v[0]

    def read_page(self, page_id: int) -> tuple[np.ndarray, np.ndarray]:
        self._check_live(page_id)
        if self._keys is None:
            raise ValueError(f"page_id={page_id} has never been written")
        return self._keys[page_id][None].copy(), self._values[page_id][None].copy()

    # -- internals ------------------------------------------------------
    def _check_issued(self, page_id: int) -> None:
        if not isinstance(page_id, (int, np.integer)) or not 0 <= page_id < self._num_issued:
            raise ValueError(f"page_id={page_id!r} was never issued by this pool ({self._num_issued} issued)")

    def _check_live(self, page_id: int) -> None:
        self._check_issued(page_id)
        if page_id in self._free:
            raise ValueError(f"page_id={page_id} is free; write or read a live page")

    def _check_chunk(self, key: Any, value: Any) -> tuple[np.ndarray, np.ndarray]:
        dtype = str(getattr(key, "dtype", "")).rsplit(".", 1)[-1]
        if dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"key dtype={dtype!r} is not one of {SUPPORTED_DTYPES}")
        value_dtype = str(getattr(value, "dtype", "")).rsplit(".", 1)[-1]
        if value_dtype != dtype:
            raise ValueError(f"value dtype={value_dtype!r} differs from key dtype={dtype!r}")
        k, v = to_numpy(key, np.float64), to_numpy(value, np.float64)
        self._incoming_dtype = dtype
        if k.ndim != 4 or k.shape[0] != 1:
            raise ValueError(f"key shape={k.shape} must be [1, H_kv, S, D]")
        if v.shape != k.shape:
            raise ValueError(f"value shape={v.shape} differs from key shape={k.shape}: key and value must have the same shape")
        if self._keys is not None:
            _, heads, _, dim = self._keys.shape
            if (k.shape[1], k.shape[3]) != (heads, dim):
                raise ValueError(f"key shape={k.shape} does not match pool pages [*, {heads}, *, {dim}]")
            if dtype != self.dtype:
                raise ValueError(f"key dtype={dtype!r} does not match the existing page storage dtype={self.dtype!r}")
        return k, v

    def _create_storage(self, chunk: np.ndarray, rows: int) -> None:
        shape = (rows, chunk.shape[1], self.page_size, chunk.shape[3])
        self._keys = np.full(shape, np.nan)
        self._values = np.full(shape, np.nan)
        self.dtype = self._incoming_dtype
        self.storage_growths += 1

    def _grow(self, needed: int) -> None:
        rows = max(4, needed, 2 * self.capacity)
        old_k, old_v = self._keys, self._values
        copied = old_k.shape[0]
        self._keys = np.full((rows,) + old_k.shape[1:], np.nan)
        self._values = np.full((rows,) + old_v.shape[1:], np.nan)
        self._keys[:copied] = old_k
        self._values[:copied] = old_v
        self.storage_growths += 1
        self.copied_pages_on_growth += copied
        self.copied_bytes_on_growth += old_k.nbytes + old_v.nbytes
