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
def token_row_index(
    page_ids: tuple[int, ...], slots: tuple[int, ...], num_heads: int, tokens_per_row: int = 1
) -> TokenRowIndex:
    """(pages, heads, slots), each int32 [R, H_kv, T] (T = tokens_per_row, R = len(page_ids) / T), for rows
    laid out as K/V come, [R, H_kv, T, D]: token t of row r (position r * T + t of the lists), head h, goes
    to storage[pages[r, h, t], heads[r, h, t], slots[r, h, t]]. A decode step's keys are [B, H_kv, 1, D]
    (T = 1, a row per request), a prefill chunk's [1, H_kv, L, D] (R = 1), so neither needs a reshape or a
    transpose before the write. Built whole (not broadcast by the write), so a write adds no broadcast
    nodes. With one row the arrays are [H_kv, T]: MLX drops an update's leading 1s before it scatters, and
    an index of the same rank needs no broadcast back."""
    rows = len(page_ids) // tokens_per_row
    grid, shape = (rows, 1, tokens_per_row), (rows, num_heads, tokens_per_row)
    pages = np.broadcast_to(np.asarray(page_ids, dtype=np.int32).reshape(grid), shape)
    heads = np.broadcast_to(np.arange(num_heads, dtype=np.int32).reshape(1, num_heads, 1), shape)
    token_slots = np.broadcast_to(np.asarray(slots, dtype=np.int32).reshape(grid), shape)
    parts = (pages, heads, token_slots) if rows > 1 else (pages[0], heads[0], token_slots[0])
    return mx.array(parts[0]), mx.array(parts[1]), mx.array(parts[2])


def write_token_rows(storage: mx.array, row_index: TokenRowIndex, rows: mx.array) -> mx.array:
    """Return `storage` with rows [R, H_kv, T, D] placed at `row_index` (token_row_index) in one scatter.

    The scatter updates a reshape of `storage` to its own shape: a new array object, so `storage` itself
    (which a checkpoint may hold) keeps its value; the reshape costs no copy and no graph node.
    """
    updated = storage.reshape(storage.shape)
    updated[row_index] = rows
    return updated
