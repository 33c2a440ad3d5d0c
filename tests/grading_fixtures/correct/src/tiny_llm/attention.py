"""Paged attention that walks each request's pages through its block table, with an online softmax.

Position s of request b lives in page block_table[b, s // page_size], slot
s % page_size; only s < context_lens[b] exist. Query head h reads kv head
h // (H_q // H_kv). mask="causal" treats the L queries as the last L
positions of the context. One page is read at a time: dense K/V is never built.
"""

import mlx.core as mx
import numpy as np

MASKED = -1e30  # a finite "minus infinity": a fully masked page leaves the running max finite


def _dtype_name(x) -> str:
    return str(x.dtype).rsplit(".", 1)[-1]


def _integers(x, name: str) -> np.ndarray:
    if isinstance(x, mx.array):
        if x.dtype not in (mx.int8, mx.int16, mx.int32, mx.int64, mx.uint8, mx.uint16, mx.uint32, mx.uint64):
            raise ValueError(f"{name} dtype={x.dtype} must be an integer type")
        return np.array(x).astype(np.int64)
    array = np.asarray(x)
    if not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{name} dtype={array.dtype} must be an integer type")
    return array.astype(np.int64)


def _check_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask):
    if mask not in (None, "causal"):
        raise NotImplementedError(f"mask={mask!r} is not supported (use None or 'causal')")
    if isinstance(page_size, bool) or not isinstance(page_size, (int, np.integer)) or page_size <= 0:
        raise ValueError(f"page_size must be a positive int, got {page_size!r}")
    if len(query.shape) != 4:
        raise ValueError(f"query shape={tuple(query.shape)} must be [B, H_q, L, D]")
    if len(key_pages.shape) != 4 or tuple(value_pages.shape) != tuple(key_pages.shape):
        raise ValueError(f"key_pages shape={tuple(key_pages.shape)} and value_pages shape="
                         f"{tuple(value_pages.shape)} must be one [P, H_kv, page_size, D]")
    batch, num_q_heads, num_queries, head_dim = query.shape
    num_pages, num_kv_heads, slots, kv_dim = key_pages.shape
    if slots != page_size:
        raise ValueError(f"key_pages page axis={slots} differs from page_size={page_size}")
    if kv_dim != head_dim:
        raise ValueError(f"key_pages head dim={kv_dim} differs from the query head dim={head_dim}")
    if num_kv_heads == 0 or num_q_heads % num_kv_heads:
        raise ValueError(f"H_q={num_q_heads} is not a multiple of H_kv={num_kv_heads}")
    if not _dtype_name(query) == _dtype_name(key_pages) == _dtype_name(value_pages):
        raise ValueError(f"dtypes differ: query {_dtype_name(query)}, key_pages {_dtype_name(key_pages)}, "
                         f"value_pages {_dtype_name(value_pages)}")
    table = _integers(block_table, "block_table")
    lens = _integers(context_lens, "context_lens")
    if table.ndim != 2 or table.shape[0] != batch:
        raise ValueError(f"block_table shape={table.shape} must be [B={batch}, max_pages]")
    if lens.shape != (batch,):
        raise ValueError(f"context_lens shape={lens.shape} must be [B={batch}]")
    owner = {}
    for row in range(batch):
        context = int(lens[row])
        if context < 0:
            raise ValueError(f"context_lens[{row}]={context} is negative")
        if 0 < context < num_queries:
            raise ValueError(f"context_lens[{row}]={context} is shorter than the query length L={num_queries}")
        live = -(-context // page_size)
        if live > table.shape[1]:
            raise ValueError(f"context_lens[{row}]={context} needs {live} pages; block_table has {table.shape[1]} columns")
        for column in range(table.shape[1]):
            page = int(table[row, column])
            if column >= live:
                if page != -1:
                    raise ValueError(f"block_table[{row}, {column}]={page} is past the context and must be -1")
            elif not 0 <= page < num_pages:
                raise ValueError(f"block_table[{row}, {column}]={page} is not a page id in [0, {num_pages})")
            elif page in owner:
                raise ValueError(f"block_table[{row}, {column}]={page} is aliased: row {owner[page]} uses it too")
            else:
                owner[page] = row
    return table, lens


def _attend_one_request(query, key_pages, value_pages, pages, context, page_size, scale, causal):
    """query [H_q, L, D] (float32) over the request's pages, one page at a time."""
    num_q_heads, num_queries, head_dim = query.shape
    num_kv_heads = key_pages.shape[1]
    group = num_q_heads // num_kv_heads
    grouped = query.reshape(num_kv_heads, group, num_queries, head_dim)
    running_max = mx.full((num_kv_heads, group, num_queries, 1), MASKED, dtype=mx.float32)
    running_sum = mx.zeros((num_kv_heads, group, num_queries, 1), dtype=mx.float32)
    accumulated = mx.zeros((num_kv_heads, group, num_queries, head_dim), dtype=mx.float32)
    query_pos = mx.arange(num_queries)[:, None] + (context - num_queries)
    for page_idx, page in enumerate(pages):
        first = page_idx * page_size
        used = min(page_size, context - first)
        keys = key_pages[page, :, :used].astype(mx.float32)[:, None]  # [H_kv, 1, used, D]
        values = value_pages[page, :, :used].astype(mx.float32)[:, None]
        scores = (grouped @ keys.swapaxes(-1, -2)) * scale  # [H_kv, group, L, used]
        if causal:
            key_pos = mx.arange(first, first + used)[None, :]
            scores = mx.where(key_pos <= query_pos, scores, MASKED)
        page_max = mx.maximum(running_max, scores.max(axis=-1, keepdims=True))
        weights = mx.exp(scores - page_max)
        if causal:
            weights = mx.where(key_pos <= query_pos, weights, 0.0)
        rescale = mx.exp(running_max - page_max)
        running_sum = running_sum * rescale + weights.sum(axis=-1, keepdims=True)
        accumulated = accumulated * rescale + weights @ values
        running_max = page_max
    return (accumulated / running_sum).reshape(num_q_heads, num_queries, head_dim)


def paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale=None, mask=None):
    table, lens = _check_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask)
    query, key_pages, value_pages = (x if isinstance(x, mx.array) else mx.array(x) for x in (query, key_pages, value_pages))
    batch, num_q_heads, num_queries, head_dim = query.shape
    scale = head_dim ** -0.5 if scale is None else float(scale)
    rows = []
    for row in range(batch):
        context = int(lens[row])
        if context == 0:
            rows.append(mx.zeros((num_q_heads, num_queries, head_dim), dtype=mx.float32))
            continue
        pages = [int(p) for p in table[row, : -(-context // page_size)]]
        rows.append(_attend_one_request(query[row].astype(mx.float32), key_pages, value_pages, pages, context,
                                        int(page_size), scale, mask == "causal"))
    return mx.stack(rows).astype(query.dtype)
