"""The one builder of K/V chunks and state snapshots for the cache tests."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import numpy as np

from pagecheck.impl.page_pool import TinyKvPagedPool
from pagecheck.impl.paged_kv_cache import TinyKvPagedCache
from pagecheck.reference.arrays import to_numpy


def random_chunk(
    rng: np.random.Generator,
    length: int,
    *,
    num_heads: int = 2,
    head_dim: int = 4,
    dtype: mx.Dtype = mx.float32,
    batch: int = 1,
) -> tuple[mx.array, mx.array]:
    """A (key, value) pair [batch, num_heads, length, head_dim] of distinct finite values."""
    shape = (batch, num_heads, length, head_dim)
    key = mx.array(rng.standard_normal(shape).astype(np.float32)).astype(dtype)
    value = mx.array(rng.standard_normal(shape).astype(np.float32)).astype(dtype)
    return key, value


def pool_state(pool: TinyKvPagedPool) -> tuple[Any, ...]:
    """Everything observable about a pool, page contents included (NaN compares equal)."""
    pages = None
    if pool.key_pages is not None and pool.value_pages is not None:
        pages = (to_numpy(pool.key_pages).tobytes(), to_numpy(pool.value_pages).tobytes())
    return (
        pool.num_pages,
        pool.capacity,
        tuple(pool.free_page_ids),
        tuple(pool.used_page_ids),
        pool.reused_page_allocations,
        pool.storage_growths,
        pool.copied_pages_on_growth,
        pool.copied_bytes_on_growth,
        pool.storage_nbytes,
        pool.dtype,
        pages,
    )


def cache_state(cache: TinyKvPagedCache) -> tuple[Any, ...]:
    return (tuple(cache.page_ids), tuple(cache.page_lens), cache.offset, cache.num_pages)


def fail_on_call(target: Any, name: str, call_number: int, monkeypatch: Any) -> list[int]:
    """Make target.name raise RuntimeError on its `call_number`-th call; returns the call counter."""
    original = getattr(target, name)
    calls = [0]

    def failing(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == call_number:
            raise RuntimeError(f"injected failure in call {call_number} of {name}")
        return original(*args, **kwargs)

    monkeypatch.setattr(target, name, failing)
    return calls
