"""The one place that writes K/V rows into a pool's page storage.

MLX arrays are functional: an update returns a new array. When the storage
array it replaces is referenced by nothing else at evaluation time, MLX donates
its buffer to the update, so the write costs O(rows) instead of a copy of the
whole pool (measured in scripts/measure_page_write.py). Keeping the write in one
function lets a native in-place op replace it without touching the pool.
"""

from __future__ import annotations

import mlx.core as mx


def write_page_rows(storage: mx.array, page_id: int, start: int, rows: mx.array) -> mx.array:
    """Return `storage` with rows [H_kv, S, D] placed at page `page_id`, slots start..start+S."""
    return mx.slice_update(storage, rows[None], mx.array([page_id, start], dtype=mx.int32), axes=(0, 2))
