"""Mutant: a cache whose tail page fills takes the next page at once, and the pool leaves it out of its counts.

num_pages counts only the pages the caches show, so the page counts every
check reads look lazy; the ids the pool goes on to issue run past its count.
"""

from pagecheck.reference.cache import TinyKvPagedCache as _ReferenceCache
from pagecheck.reference.pool import TinyKvPagedPool as _ReferencePool
from pagecheck.reference.subject import BatchingKvCache, paged_attention  # noqa: F401

KILLED_BY = "lazy_tail"


class TinyKvPagedPool(_ReferencePool):
    def __init__(self, page_size: int = 128) -> None:
        super().__init__(page_size)
        self._uncounted: set[int] = set()

    @property
    def num_pages(self) -> int:
        return self._num_issued - len(self._uncounted)

    def take_uncounted(self) -> int:
        page_id = self.allocate_page()
        self._uncounted.add(page_id)
        return page_id


class TinyKvPagedCache(_ReferenceCache):
    def append(self, key, value) -> None:
        super().append(key, value)
        if self.page_lens[-1] == self.pool.page_size and getattr(self, "_spare", None) is None:
            self._spare = self.pool.take_uncounted()
