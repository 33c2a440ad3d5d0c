"""The MLX implementation of tiny-llm's Week 3 paged KV cache and paged attention API."""

from pagecheck.impl.attention import paged_attention
from pagecheck.impl.dense_attention import causal_mask, scaled_dot_product_attention_grouped
from pagecheck.impl.kv_cache import BatchingKvCache
from pagecheck.impl.page_pool import TinyKvPagedPool
from pagecheck.impl.paged_kv_cache import TinyKvPagedCache
from pagecheck.impl.paged_metadata import PagedKvMetadata

__all__ = [
    "BatchingKvCache",
    "PagedKvMetadata",
    "TinyKvPagedCache",
    "TinyKvPagedPool",
    "causal_mask",
    "paged_attention",
    "scaled_dot_product_attention_grouped",
]
