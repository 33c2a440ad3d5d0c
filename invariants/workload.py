"""Tokens a check writes into a cache, and the dense record of them the oracle reads.

The record is built from the values sent, not read back from the subject, so
a cache that stores, orders or counts tokens wrongly cannot agree with it by
accident.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pagecheck.reference.arrays import to_numpy
from pagecheck.reference.attention import dense_attention
from pagecheck.reference.layouts import round_to_dtype


class WrittenKv:
    """Everything appended to one cache, in logical order: float64 [H_kv, tokens, D] each."""

    def __init__(self, num_kv_heads: int, head_dim: int, dtype: str) -> None:
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.dtype = dtype
        self.keys = np.zeros((num_kv_heads, 0, head_dim))
        self.values = np.zeros((num_kv_heads, 0, head_dim))

    @property
    def length(self) -> int:
        return self.keys.shape[1]

    def make_chunk(self, rng: np.random.Generator, length: int) -> tuple[Any, Any]:
        """Draw a [1, H_kv, length, D] chunk (MLX, in dtype), record it, and return it to append."""
        import mlx.core as mx

        shape = (self.num_kv_heads, length, self.head_dim)
        key = round_to_dtype(rng.standard_normal(shape), self.dtype)
        value = round_to_dtype(rng.standard_normal(shape), self.dtype)
        self.keys = np.concatenate([self.keys, key.astype(np.float64)], axis=1)
        self.values = np.concatenate([self.values, value.astype(np.float64)], axis=1)
        dt = getattr(mx, self.dtype)
        return mx.array(key[None]).astype(dt), mx.array(value[None]).astype(dt)

    def read_back(self, chunk: tuple[Any, Any]) -> None:
        """Record the last chunk appended as its arrays read now: the course compares what a cache hands back with
        the very arrays it appended, read after the call, so an append that changed them in place (keys scaled
        where they lie) fails there, and a course check that holds the same record fails it too."""
        key, value = (to_numpy(x, np.float64)[0] for x in chunk)
        length = key.shape[1]
        self.keys = np.concatenate([self.keys[:, : self.length - length], key], axis=1)
        self.values = np.concatenate([self.values[:, : self.length - length], value], axis=1)

    def truncate(self, length: int) -> None:
        """Forget every token from `length` on, as a cache's rewind does."""
        self.keys, self.values = self.keys[:, :length], self.values[:, :length]

    def make_query(self, rng: np.random.Generator, num_q_heads: int, length: int) -> np.ndarray:
        return round_to_dtype(rng.standard_normal((1, num_q_heads, length, self.head_dim)), self.dtype)

    def attention(self, query: np.ndarray, mask: str | None) -> np.ndarray:
        """The float64 oracle over exactly the tokens written."""
        return dense_attention(query, self.keys[None], self.values[None], mask=mask)
