"""Mutant: a second free of a page raises ValueError, but its message does not say the page is "already free"."""

from pagecheck.reference.pool import TinyKvPagedPool as _ReferencePool
from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedCache, paged_attention  # noqa: F401

KILLED_BY = "release_once"


class TinyKvPagedPool(_ReferencePool):
    def free_page(self, page_id: int) -> None:
        self._check_issued(page_id)
        if page_id in self._free:
            raise ValueError(f"cannot free page_id={page_id}")
        self._free.append(page_id)
