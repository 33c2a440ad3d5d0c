"""Dense grouped-query attention in readable mlx.core (the course's Week 2 path)."""

from __future__ import annotations

import mlx.core as mx


def causal_mask(L: int, S: int, dtype: mx.Dtype) -> mx.array:
    """Additive [L, S] mask: 0 where key s is visible to query row l, -inf elsewhere.

    The L queries are the last L of the S positions, so row l sees s <= l + S - L.
    """
    rows = mx.arange(L)[:, None]
    keys = mx.arange(S)[None, :]
    return mx.where(keys <= rows + (S - L), mx.array(0.0, dtype=dtype), mx.array(-mx.inf, dtype=dtype))


def scaled_dot_product_attention_grouped(
    query: mx.array,
    key: mx.array,
    value: mx.array,
    scale: float | None = None,
    mask: mx.array | str | None = None,
) -> mx.array:
    """softmax(q k^T * scale + mask) v with H_q query heads sharing H_kv kv heads.

    query [..., H_q, L, D]; key and value [..., H_kv, S, D]; query head h reads
    kv head h // (H_q // H_kv). mask is None, "causal", or an array that
    broadcasts to [..., H_q, L, S] and is added to the scores. Softmax runs in
    float32; the result has the query dtype.
    """
    *batch_shape, num_q_heads, num_queries, head_dim = query.shape
    num_kv_heads, num_keys = key.shape[-3], key.shape[-2]
    if num_q_heads % num_kv_heads:
        raise ValueError(f"H_q={num_q_heads} is not a multiple of H_kv={num_kv_heads}")
    group = num_q_heads // num_kv_heads
    scale = head_dim**-0.5 if scale is None else scale

    # [..., H_kv, group, L, D] against [..., H_kv, 1, S, D].
    q = query.astype(mx.float32).reshape(*batch_shape, num_kv_heads, group, num_queries, head_dim)
    k = mx.expand_dims(key.astype(mx.float32), -3)
    v = mx.expand_dims(value.astype(mx.float32), -3)
    scores = (q @ k.swapaxes(-1, -2)) * scale
    if isinstance(mask, str):
        if mask != "causal":
            raise NotImplementedError(f"mask={mask!r} is not supported (use None, 'causal' or an array)")
        scores = scores + causal_mask(num_queries, num_keys, mx.float32)
    elif mask is not None:
        full = mx.broadcast_to(mask.astype(mx.float32), (*batch_shape, num_q_heads, num_queries, num_keys))
        scores = scores + full.reshape(scores.shape)
    out = mx.softmax(scores, axis=-1) @ v
    return out.reshape(query.shape).astype(query.dtype)
