from pagecheck.impl.kv_cache import BatchingKvCache

__all__ = ["BatchingKvCache"]
