"""Copied beside every overlay as src/tiny_llm/dense_rows.py: dense attention over K/V an overlay has gathered,
request by request. How the K/V is gathered is each overlay's own (its `gather`), so that is where the grader's
watch sees it."""

import mlx.core as mx


def dense_attention(q, k, v, scale, causal):
    """q [..., L, D] against k, v [..., S, D], the causal mask aligned to the end of the context."""
    scores = (q @ k.swapaxes(-1, -2)) * scale
    if causal:
        length, context = q.shape[-2], k.shape[-2]
        visible = mx.arange(context)[None, :] <= mx.arange(length)[:, None] + (context - length)
        scores = mx.where(visible, scores, -1e30)
    return mx.softmax(scores, axis=-1) @ v


def attend_rows(query, kv_heads, lens, scale, mask, gather):
    """Float32 [B, H_q, L, D]: each row's query against gather(row, n) -> (k, v), each [H_kv, n, D] float32;
    a row of context 0 gives zeros."""
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    batch, heads, length, dim = query.shape
    rows = []
    for row in range(batch):
        n = int(lens[row])
        if n == 0:
            rows.append(mx.zeros((heads, length, dim), dtype=mx.float32))
            continue
        k, v = gather(row, n)
        q = query[row].astype(mx.float32).reshape(kv_heads, heads // kv_heads, length, dim)
        rows.append(dense_attention(q, k[:, None], v[:, None], scale, mask == "causal").reshape(heads, length, dim))
    return mx.stack(rows)
