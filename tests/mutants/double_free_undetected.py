"""Mutant: free_page accepts an id that is already free and lists it twice."""

from pagecheck.reference.pool import TinyKvPagedPool as _ReferencePool
from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedCache, paged_attention  # noqa: F401

KILLED_BY = "release_once"


class TinyKvPagedPool(_ReferencePool):
    def free_page(self, page_id: int) -> None:
        self._check_issued(page_id)
        self._free.append(page_id)
