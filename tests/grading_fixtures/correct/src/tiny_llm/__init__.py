"""A correct Week 3 submission in tiny-llm's layout, self-contained: MLX and NumPy only, nothing of pagecheck."""

from .attention import paged_attention
from .kv_cache import BatchingKvCache
from .paged_kv_cache import PagedKvMetadata, TinyKvPagedCache, TinyKvPagedPool

__all__ = ["BatchingKvCache", "PagedKvMetadata", "TinyKvPagedCache", "TinyKvPagedPool", "paged_attention"]
