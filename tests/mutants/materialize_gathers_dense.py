"""Mutant: materialize() evaluates the request's tokens gathered dense instead of the pool's page storage."""

from pagecheck.reference.cache import TinyKvPagedCache as _ReferenceCache
from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedPool, paged_attention  # noqa: F401

KILLED_BY = "page_storage"


class TinyKvPagedCache(_ReferenceCache):
    def materialize(self) -> None:
        self.gather_dense()
