"""The dense baseline: each request's K/V for one layer in one contiguous buffer reserved for its whole life.

The buffer [1, H_kv, capacity, D] is created by the first append with the
capacity the request can ever need (prompt plus output), so it never grows;
appends write in place (the same donated slice update as the page pool).
Attention reads the written prefix, which MLX copies into a contiguous
tensor (the model counts that copy as repack traffic).
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx

from pagecheck.impl import page_write
from pagecheck.impl.page_pool import check_kv_pair, is_int


@dataclass(frozen=True)
class DenseKv:
    """Dense attention inputs for the batch rows `rows` (None: every row), in that order:
    keys/values [R, H_kv, S, D] and int32 context_lens [R]."""

    keys: mx.array
    values: mx.array
    context_lens: mx.array
    rows: mx.array | None = None


class DenseKvCache:
    def __init__(self, capacity: int) -> None:
        if not is_int(capacity) or capacity <= 0:
            raise ValueError(f"capacity must be a positive int, got {capacity!r}")
        self.capacity = capacity
        self._keys: mx.array | None = None
        self._values: mx.array | None = None
        self._offset = 0

    @property
    def offset(self) -> int:
        return self._offset

    @property
    def nbytes(self) -> int:
        """Bytes reserved by the buffers (zero before the first append and after release)."""
        return 0 if self._keys is None or self._values is None else self._keys.nbytes + self._values.nbytes

    def append(self, key: mx.array, value: mx.array) -> None:
        """Write key/value [1, H_kv, S, D] after the tokens already held."""
        check_kv_pair(key, value)
        if key.ndim != 4 or key.shape[0] != 1:
            raise ValueError(f"key shape={tuple(key.shape)} must be [1, H_kv, S, D]")
        length = key.shape[2]
        if self._offset + length > self.capacity:
            raise ValueError(
                f"key length S={length} at offset={self._offset} overflows capacity={self.capacity}"
            )
        if self._keys is None or self._values is None:
            shape = (1, key.shape[1], self.capacity, key.shape[3])
            self._keys, self._values = mx.zeros(shape, dtype=key.dtype), mx.zeros(shape, dtype=key.dtype)
        if (key.shape[1], key.shape[3], key.dtype) != (self._keys.shape[1], self._keys.shape[3], self._keys.dtype):
            raise ValueError(
                f"key shape={tuple(key.shape)} dtype={key.dtype} does not match the buffer "
                f"{tuple(self._keys.shape)} {self._keys.dtype}"
            )
        self._keys = page_write.write_page_rows(self._keys, 0, self._offset, key[0])
        self._values = page_write.write_page_rows(self._values, 0, self._offset, value[0])
        self._offset += length

    def prefix(self, length: int) -> tuple[mx.array, mx.array]:
        """The first `length` positions (zeros past the offset), each [1, H_kv, length, D]."""
        if self._keys is None or self._values is None:
            raise ValueError("the cache holds no tokens yet")
        keys, values = self._keys[:, :, :length, :], self._values[:, :, :length, :]
        if length > self.capacity:
            padding = ((0, 0), (0, 0), (0, length - self.capacity), (0, 0))
            keys, values = mx.pad(keys, padding), mx.pad(values, padding)
        return keys, values

    def update_and_fetch_dense(self, key: mx.array, value: mx.array) -> DenseKv:
        """Append, then this request's tokens as dense K/V [1, H_kv, offset, D]."""
        self.append(key, value)
        keys, values = self.prefix(self._offset)
        return DenseKv(keys, values, mx.array([self._offset], dtype=mx.int32))

    def release(self) -> None:
        """Drop the buffers; the cache is empty again."""
        self._keys = self._values = None
        self._offset = 0
