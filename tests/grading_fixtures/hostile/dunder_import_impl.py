"""Hostile: delegates to the grader's fast implementation through __import__."""

_impl = __import__("impl.attention").attention
_pages = __import__("impl.paged_kv_cache").paged_kv_cache
paged_attention = _impl.paged_attention
TinyKvPagedPool = _pages.TinyKvPagedPool
TinyKvPagedCache = _pages.TinyKvPagedCache
