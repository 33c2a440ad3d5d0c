"""The MLX implementation of tiny-llm's Week 3 paged KV cache and paged attention API."""

from impl.attention import paged_attention
from impl.dense_attention import causal_mask, scaled_dot_product_attention_grouped
from impl.kv_cache import BatchingKvCache
from impl.page_pool import TinyKvPagedPool
from impl.paged_kv_cache import TinyKvPagedCache
from impl.paged_metadata import PagedKvMetadata

__all__ = [
    "BatchingKvCache",
    "PagedKvMetadata",
    "TinyKvPagedCache",
    "TinyKvPagedPool",
    "causal_mask",
    "paged_attention",
    "scaled_dot_product_attention_grouped",
]
