"""The paged-attention input contract as a readable list of rejections.

Every rule raises ValueError naming the field and the bad value, before any
arithmetic happens; the message carries the phrase the course's own tests
match ("nonnegative", "not covered", "outside physical page storage",
"aliased", "must use the -1 sentinel", "positive integer", "must be zero or at
least query length"). A block-table entry is "live" when it maps a position
below its row's context; every other entry must be -1. Within a row the table
is checked before the context is compared with the query length.
"""

from __future__ import annotations

import math
import reprlib
from typing import Any

import numpy as np

from pagecheck.reference.arrays import to_numpy


# Tables with at least this many entries are first checked in bulk with NumPy
# (the loop below costs about 0.3 us per entry: 2.3 ms at B 64 x 128 pages).
# The loop stays the statement of the rules: it runs whenever the bulk check
# does not accept, and its exception names the first bad entry.
BULK_CHECK_MIN_ENTRIES = 64
FLOAT32_MAX = float(np.finfo(np.float32).max)


def _dtype(x: Any) -> str:
    return str(x.dtype).rsplit(".", 1)[-1]


def is_supported_mask(mask: Any) -> bool:
    """None or "causal": the masks paged attention takes. Compares only strings, so an array mask (the
    course's API allows one) gets the NotImplementedError below, not an error from the array's ==."""
    return mask is None or (isinstance(mask, str) and mask == "causal")


def _mask_label(mask: Any) -> str:
    shape = getattr(mask, "shape", None)
    return f"an array of shape {tuple(shape)}" if shape is not None and not isinstance(mask, str) else repr(mask)


def check_mask(mask: Any) -> None:
    """NotImplementedError unless `mask` is one paged attention takes (is_supported_mask); the contract's first
    rule."""
    if not is_supported_mask(mask):
        raise NotImplementedError(f"mask={_mask_label(mask)} is not supported (use None or 'causal')")


def check_scale(scale: Any) -> float | None:
    """The softmax scale as a float, or None for 1/sqrt(D): a real number (a 0-d array included) that float32
    holds finite; ValueError naming it otherwise."""
    if scale is None:
        return None
    if isinstance(scale, (bool, str, bytes)) or getattr(scale, "size", 1) != 1:
        raise ValueError(f"scale={reprlib.repr(scale)} must be a real number or None")
    try:
        value = float(scale)
    except (TypeError, ValueError):
        raise ValueError(f"scale={reprlib.repr(scale)} must be a real number or None") from None
    if not (math.isfinite(value) and abs(value) <= FLOAT32_MAX):
        raise ValueError(f"scale={value!r} must be a finite number that float32 holds (|scale| < 3.4e38)")
    return value


def check_paged_inputs(
    query: Any,
    key_pages: Any,
    value_pages: Any,
    block_table: Any,
    context_lens: Any,
    page_size: int,
    mask: str | None = None,
) -> None:
    check_mask(mask)
    if not isinstance(page_size, (int, np.integer)) or isinstance(page_size, bool) or page_size <= 0:
        raise ValueError(f"page_size={page_size!r} must be a positive integer")
    for name, array in (("query", query), ("key_pages", key_pages), ("value_pages", value_pages)):
        if not (hasattr(array, "shape") and hasattr(array, "dtype")):
            raise ValueError(f"{name}={reprlib.repr(array)} must be an array (mlx.core.array or numpy.ndarray)")
    if len(query.shape) != 4:
        raise ValueError(f"query shape={tuple(query.shape)} must be [B, H_q, L, D]")
    if len(key_pages.shape) != 4:
        raise ValueError(f"key_pages shape={tuple(key_pages.shape)} must be [P, H_kv, page_size, D]")
    if tuple(value_pages.shape) != tuple(key_pages.shape):
        raise ValueError(f"value_pages shape={tuple(value_pages.shape)} differs from key_pages {tuple(key_pages.shape)}")
    batch, num_q_heads, num_queries, head_dim = query.shape
    num_pages, num_kv_heads, slots, kv_dim = key_pages.shape
    if slots != page_size:
        raise ValueError(f"key_pages page axis={slots} differs from page_size={page_size}")
    if kv_dim != head_dim:
        raise ValueError(f"key_pages head dim={kv_dim} differs from query head dim={head_dim}")
    if num_kv_heads == 0 or num_q_heads % num_kv_heads:
        raise ValueError(f"H_q={num_q_heads} is not a multiple of H_kv={num_kv_heads}")
    if not (_dtype(query) == _dtype(key_pages) == _dtype(value_pages)):
        raise ValueError(
            f"dtypes differ: query {_dtype(query)}, key_pages {_dtype(key_pages)}, value_pages {_dtype(value_pages)}"
        )
    table = to_numpy(block_table)
    lens = to_numpy(context_lens)
    if table.ndim != 2 or table.shape[0] != batch:
        raise ValueError(f"block_table shape={table.shape} must be [B={batch}, max_pages]")
    if not np.issubdtype(table.dtype, np.integer):
        raise ValueError(f"block_table dtype={table.dtype} must be an integer type")
    if lens.shape != (batch,):
        raise ValueError(f"context_lens shape={lens.shape} must be [B={batch}]")
    if not np.issubdtype(lens.dtype, np.integer):
        raise ValueError(f"context_lens dtype={lens.dtype} must be an integer type")

    if table.size >= BULK_CHECK_MIN_ENTRIES and metadata_valid_in_bulk(table, lens, num_queries, page_size, num_pages):
        return
    seen: dict[int, int] = {}
    for b in range(batch):
        n = int(lens[b])
        if n < 0:
            raise ValueError(f"context_lens[{b}]={n} must be nonnegative")
        live = -(-n // page_size)
        if live > table.shape[1]:
            raise ValueError(
                f"context_lens[{b}]={n} is not covered by block_table: it needs {live} pages of {page_size} "
                f"and the table has {table.shape[1]} columns"
            )
        for col in range(table.shape[1]):
            page = int(table[b, col])
            if col >= live:
                if page != -1:
                    raise ValueError(
                        f"block_table[{b}, {col}]={page} lies past context_lens[{b}]={n}: padding must use "
                        f"the -1 sentinel"
                    )
                continue
            if not 0 <= page < num_pages:
                raise ValueError(
                    f"block_table[{b}, {col}]={page} is outside physical page storage: page ids are [0, {num_pages})"
                )
            if page in seen:
                raise ValueError(f"block_table[{b}, {col}]={page} is aliased: row {seen[page]} uses it too")
            seen[page] = b
        # After the row's table: a malformed table is reported first, whatever the query length.
        if 0 < n < num_queries:
            raise ValueError(f"context_lens[{b}]={n} must be zero or at least query length L={num_queries}")


def metadata_valid_in_bulk(table: np.ndarray, lens: np.ndarray, num_queries: int, page_size: int,
                           num_pages: int) -> bool:
    """True exactly when the rule loop of check_paged_inputs accepts `table` and
    `lens` (tests/test_validation_bulk.py holds the two to the same verdicts)."""
    lens = lens.astype(np.int64)
    if (lens < 0).any() or ((lens > 0) & (lens < num_queries)).any():
        return False
    live = -(-lens // page_size)
    if (live > table.shape[1]).any():
        return False
    in_context = np.arange(table.shape[1])[None, :] < live[:, None]
    pages = table[in_context].astype(np.int64)
    if (table[~in_context] != -1).any() or (pages < 0).any() or (pages >= num_pages).any():
        return False
    if num_pages <= 64 * pages.size + 65536:
        marks = np.zeros(num_pages, dtype=bool)  # one flag per page id: cheaper than sorting
        marks[pages] = True
        return int(np.count_nonzero(marks)) == pages.size
    ordered = np.sort(pages)
    return bool((ordered[1:] != ordered[:-1]).all())
