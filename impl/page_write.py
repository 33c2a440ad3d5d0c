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

TokenRowIndex = tuple[mx.array, mx.array, mx.array]


def write_page_rows(storage: mx.array, page_id: int, start: int, rows: mx.array) -> mx.array:
    """Return `storage` with rows [H_kv, S, D] placed at page `page_id`, slots start..start+S."""
    return mx.slice_update(storage, rows[None], mx.array([page_id, start], dtype=mx.int32), axes=(0, 2))


@lru_cache(maxsize=TOKEN_INDEX_CACHE_SIZE)
def token_row_index(page_ids: tuple[int, ...], slots: tuple[int, ...], num_heads: int) -> TokenRowIndex:
    """(pages, heads, slots), each int32 [N, H_kv, 1]: storage[pages[i, h, 0], heads[i, h, 0], slots[i, h, 0]] is
    the row of token i, head h. Built whole (not broadcast by the write), so a write adds no broadcast nodes;
    the trailing 1 makes the indexed shape [N, H_kv, 1, D], a decode step's keys as they come ([B, H_kv, 1, D]),
    so they need no reshape before the write."""
    shape = (len(page_ids), num_heads, 1)
    pages = np.broadcast_to(np.asarray(page_ids, dtype=np.int32)[:, None, None], shape)
    heads = np.broadcast_to(np.arange(num_heads, dtype=np.int32)[None, :, None], shape)
    token_slots = np.broadcast_to(np.asarray(slots, dtype=np.int32)[:, None, None], shape)
    return mx.array(pages), mx.array(heads), mx.array(token_slots)


def write_token_rows(storage: mx.array, row_index: TokenRowIndex, rows: mx.array) -> mx.array:
    """Return `storage` with rows [N, H_kv, 1, D] (token i's rows as a one-token chunk) placed at `row_index`
    (token_row_index) in one scatter.

    The scatter updates a reshape of `storage` to its own shape: a new array object, so `storage` itself
    (which a checkpoint may hold) keeps its value; the reshape costs no copy and no graph node.
    """
    updated = storage.reshape(storage.shape)
    updated[row_index] = rows
    return updated
