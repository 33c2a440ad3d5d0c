from pagecheck.impl.paged_kv_cache import TinyKvPagedCache, TinyKvPagedPool

__all__ = ["TinyKvPagedCache", "TinyKvPagedPool"]
