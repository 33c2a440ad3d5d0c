"""The one place that writes K/V rows into a pool's page storage.

MLX arrays are functional: an update returns a new array. When the storage
array it replaces is referenced by nothing else at evaluation time, MLX donates
its buffer to the update, so the write costs O(rows) instead of a copy of the
whole pool (measured in scripts/measure_page_write.py). Keeping the write in one
function lets a native in-place op replace it without touching the pool.
"""

from __future__ import annotations

from functools import lru_cache

import mlx.core as mx
import numpy as np

# Token-row index arrays kept for reuse: every layer of a decode step writes the same positions.
TOKEN_INDEX_CACHE_SIZE = 16


def write_page_rows(storage: mx.array, page_id: int, start: int, rows: mx.array) -> mx.array:
    """Return `storage` with rows [H_kv, S, D] placed at page `page_id`, slots start..start+S."""
    return mx.slice_update(storage, rows[None], mx.array([page_id, start], dtype=mx.int32), axes=(0, 2))


@lru_cache(maxsize=TOKEN_INDEX_CACHE_SIZE)
def token_row_index(page_ids: tuple[int, ...], slots: tuple[int, ...], num_heads: int, page_size: int) -> mx.array:
    """int32 [N * H_kv]: the row of a [P * H_kv * page_size, D] view of storage that holds token i, head h.

    Row (i, h) is ((page_ids[i] * H_kv + h) * page_size + slots[i]), in the order of a [N, H_kv, D] array.
    """
    pages = np.asarray(page_ids, dtype=np.int64)[:, None]
    heads = np.arange(num_heads, dtype=np.int64)[None, :]
    rows = (pages * num_heads + heads) * page_size + np.asarray(slots, dtype=np.int64)[:, None]
    return mx.array(rows.reshape(-1).astype(np.int32))


def write_token_rows(storage: mx.array, row_index: mx.array, rows: mx.array) -> mx.array:
    """Return `storage` with rows [N, H_kv, D] placed at `row_index` (token_row_index) in one scatter."""
    head_dim = storage.shape[-1]
    flat = storage.reshape(-1, head_dim)
    flat[row_index] = rows.reshape(-1, head_dim)
    return flat.reshape(storage.shape)
