"""Qwen3 grouped-query attention over a KV cache, on one of three K/V read paths.

Every path appends this call's keys/values to the cache and attends causally:
the L queries are the last L positions of each row's context, for prefill
chunks and decode steps alike.

- "paged": cache.update_and_fetch_paged, then paged_attention on the pages.
- "paged_gather": the same paged storage, but the pages are gathered into
  dense K/V first and dense attention runs on that (the ablation that shows
  what the gather costs).
- "dense": a dense cache hands back contiguous K/V rebuilt for this call.

The cache type must match the path: a dense cache on a paged path (or the
reverse) is a TypeError, never a silent switch to the other path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mlx.core as mx

from pagecheck import ext
from pagecheck.impl.attention import paged_attention
from pagecheck.serving.dense_kv_batch import DenseKvBatch
from pagecheck.serving.dense_kv_cache import DenseKvCache
from pagecheck.impl.kv_cache import BatchingKvCache
from pagecheck.serving.kv_traffic import KvTraffic
from pagecheck.serving.model_config import Qwen3Config
from pagecheck.impl.page_gather import gather_pages_dense
from pagecheck.impl.paged_kv_cache import TinyKvPagedCache
from pagecheck.serving.quantized import quantized_linear
from pagecheck.serving.qwen3_weights import Qwen3LayerWeights

ATTENTION_PATHS = ("paged", "paged_gather", "dense")
PAGED_CACHES = (TinyKvPagedCache, BatchingKvCache)
DENSE_CACHES = (DenseKvCache, DenseKvBatch)


def check_attention_path(path: str) -> None:
    if path not in ATTENTION_PATHS:
        raise ValueError(f"attention_path={path!r} is not one of {ATTENTION_PATHS}")


def check_cache_for_path(cache: Any, path: str) -> None:
    expected = DENSE_CACHES if path == "dense" else PAGED_CACHES
    if not isinstance(cache, expected):
        names = " or ".join(kind.__name__ for kind in expected)
        raise TypeError(f"attention path {path!r} needs a {names}, got {type(cache).__name__}")


def project_qkv(
    x: mx.array, offsets: int | mx.array, layer: Qwen3LayerWeights, config: Qwen3Config
) -> tuple[mx.array, mx.array, mx.array]:
    """x [B, L, hidden] (already normed); offsets: tokens already cached per row (int or int32 [B]).

    Returns query [B, H_q, L, D] and key, value [B, H_kv, L, D], with q/k norms and rotary applied: one
    matmul on the stacked q|k|v rows, then one extension dispatch (ext.qk_norm_rope) for the head split,
    both norms and both rotations."""
    qkv = quantized_linear(x, layer.qkv_proj)
    if isinstance(offsets, mx.array):
        starts = offsets if offsets.dtype == mx.int32 else offsets.astype(mx.int32)
    else:
        # A host-made array is data, not a graph node: mx.full would add two nodes a layer (Broadcast, Full).
        starts = mx.array([offsets] * x.shape[0], dtype=mx.int32)
    return ext.qk_norm_rope(
        qkv, layer.q_norm, layer.k_norm, starts, config.num_q_heads, config.num_kv_heads, config.rms_norm_eps,
        config.rope_theta,
    )


def output_projection(attended: mx.array, layer: Qwen3LayerWeights) -> mx.array:
    """attended [B, H_q, L, D] -> [B, L, hidden] through o_proj."""
    return quantized_linear(_merge_heads(attended), layer.o_proj)


def _merge_heads(x: mx.array) -> mx.array:
    """[B, heads, L, D] -> [B, L, heads * D]. At L == 1 (a decode step) both orders are the same memory, so a
    reshape alone gives it: no transpose node."""
    batch, heads, length, head_dim = x.shape
    if length == 1:
        return x.reshape(batch, 1, heads * head_dim)
    return x.transpose(0, 2, 1, 3).reshape(batch, length, heads * head_dim)


def attend(
    query: mx.array, key: mx.array, value: mx.array, cache: Any, path: str, traffic: KvTraffic
) -> mx.array:
    """Append key/value [B, H_kv, L, D] to `cache` and attend query [B, H_q, L, D] causally on `path`."""
    check_cache_for_path(cache, path)
    if path == "dense":
        dense = cache.update_and_fetch_dense(key, value)
        traffic.repack_bytes += dense.keys.nbytes + dense.values.nbytes
        return _on_rows(query, dense.rows, lambda rows_query: ext.dense_attention(
            rows_query, dense.keys, dense.values, None, True, dense.context_lens
        ))
    metadata = cache.update_and_fetch_paged(key, value, mask_length=key.shape[2], mask="causal")
    if path == "paged":
        return paged_attention(
            query, metadata.key_pages, metadata.value_pages, metadata.block_table, metadata.context_lens,
            metadata.page_size, mask="causal",
        )
    # Gather only the rows that hold a request: an empty decode slot has nothing to gather.
    occupied = [row for row, length in enumerate(metadata.context_lens.tolist()) if length > 0]
    rows = None if len(occupied) == query.shape[0] else mx.array(occupied, dtype=mx.int32)
    block_table = metadata.block_table if rows is None else metadata.block_table[rows]
    context_lens = metadata.context_lens if rows is None else metadata.context_lens[rows]
    keys = gather_pages_dense(metadata.key_pages, block_table)
    values = gather_pages_dense(metadata.value_pages, block_table)
    traffic.gather_bytes += keys.nbytes + values.nbytes
    return _on_rows(query, rows, lambda rows_query: ext.dense_attention(
        rows_query, keys, values, None, True, context_lens
    ))


def _on_rows(query: mx.array, rows: mx.array | None, attend: Callable[[mx.array], mx.array]) -> mx.array:
    """attend(query[rows]) placed back at `rows` of a zero [B, ...] output (rows None: every row)."""
    if rows is None:
        return attend(query)
    out = mx.zeros(query.shape, dtype=query.dtype)
    out[rows] = attend(query[rows])
    return out
