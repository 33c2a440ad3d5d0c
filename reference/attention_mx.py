"""The paged-attention equation written readably with mlx.core: the second oracle.

Same contract as reference/attention.py, vectorised over the batch: gather
each request's keys through its block table, score, mask, softmax, weight the
values. Math in float32, result in the query's dtype. Unlike the float64
oracle it runs on any MLX device, so it also checks GPU subjects in place;
its float32 accuracy is float32's only on the CPU, since on CUDA MLX may run
float32 matmuls in TF32 (10-bit mantissa).
"""

from __future__ import annotations

import mlx.core as mx


def gather_pages(pages: mx.array, block_table: mx.array, width: int, page_size: int) -> mx.array:
    """[P, H_kv, page_size, D] pages -> [B, H_kv, width, D] in logical order.

    Padding entries (-1) are clamped to page 0: the positions they would
    supply lie past every row's context and are masked out below.
    """
    positions = mx.arange(width)
    ids = mx.maximum(block_table[:, positions // page_size], 0)  # [B, width]
    slots = positions % page_size  # [width]
    gathered = pages[ids, :, slots[None, :], :]  # [B, width, H_kv, D]
    return gathered.transpose(0, 2, 1, 3)


def paged_attention(
    query: mx.array,
    key_pages: mx.array,
    value_pages: mx.array,
    block_table: mx.array,
    context_lens: mx.array,
    page_size: int,
    scale: float | None = None,
    mask: str | None = None,
) -> mx.array:
    if mask not in (None, "causal"):
        raise NotImplementedError(f"mask={mask!r} is not supported (use None or 'causal')")
    batch, num_q_heads, num_queries, head_dim = query.shape
    num_kv_heads = key_pages.shape[1]
    group = num_q_heads // num_kv_heads
    scale = head_dim**-0.5 if scale is None else scale
    width = max(int(block_table.shape[1]) * page_size, 1)

    keys = gather_pages(key_pages, block_table, width, page_size).astype(mx.float32)
    values = gather_pages(value_pages, block_table, width, page_size).astype(mx.float32)
    # Query heads h*group .. h*group+group-1 share kv head h.
    q = query.astype(mx.float32).reshape(batch, num_kv_heads, group * num_queries, head_dim)
    scores = (q @ keys.transpose(0, 1, 3, 2)) * scale
    scores = scores.reshape(batch, num_kv_heads, group, num_queries, width)

    lens = context_lens.astype(mx.int32).reshape(batch, 1, 1, 1, 1)
    key_pos = mx.arange(width).reshape(1, 1, 1, 1, width)
    visible = key_pos < lens
    if mask == "causal":
        row = mx.arange(num_queries).reshape(1, 1, 1, num_queries, 1)
        visible = visible & (key_pos <= row + lens - num_queries)
    # `where` (not addition of -inf) keeps NaN from unmapped slots out of the sum.
    scores = mx.where(visible, scores, -mx.inf)
    row_max = mx.max(scores, axis=-1, keepdims=True)
    weights = mx.where(visible, mx.exp(scores - mx.where(mx.isinf(row_max), 0.0, row_max)), 0.0)
    denom = mx.sum(weights, axis=-1, keepdims=True)
    probs = weights / mx.where(denom == 0, 1.0, denom)
    # Slots past the context may hold anything (NaN poison included), and 0 * NaN
    # is NaN, so they are zeroed before the weighted sum.
    live = mx.arange(width).reshape(1, 1, width, 1) < context_lens.astype(mx.int32).reshape(batch, 1, 1, 1)
    values = mx.where(live, values, 0.0)
    out = probs.reshape(batch, num_kv_heads, group * num_queries, width) @ values
    return out.reshape(batch, num_q_heads, num_queries, head_dim).astype(query.dtype)
