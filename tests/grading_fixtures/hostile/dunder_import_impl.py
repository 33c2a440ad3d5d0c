"""Hostile: delegates to the grader's fast implementation through __import__."""

_impl = __import__("pagecheck.impl.attention").impl.attention
_pages = __import__("pagecheck.impl.paged_kv_cache").impl.paged_kv_cache
paged_attention = _impl.paged_attention
TinyKvPagedPool = _pages.TinyKvPagedPool
TinyKvPagedCache = _pages.TinyKvPagedCache
