"""Mutant: release keeps the last page out of reuse but lists it free, so the pool's own counts look right.

The free list, num_free_pages and the "already free" refusal all include the
leaked page; allocate_page never hands it out again. Only what the next
request gets shows the leak.
"""

from pagecheck.reference.cache import TinyKvPagedCache as _ReferenceCache
from pagecheck.reference.pool import TinyKvPagedPool as _ReferencePool
from pagecheck.reference.subject import BatchingKvCache, paged_attention  # noqa: F401

KILLED_BY = "release_once"


class TinyKvPagedPool(_ReferencePool):
    def __init__(self, page_size: int = 128) -> None:
        super().__init__(page_size)
        self._leaked: list[int] = []

    @property
    def num_free_pages(self) -> int:
        return len(self._free) + len(self._leaked)

    @property
    def free_page_ids(self) -> list[int]:
        return [*self._free, *self._leaked]

    @property
    def used_page_ids(self) -> list[int]:
        free = set(self.free_page_ids)
        return [i for i in range(self._num_issued) if i not in free]

    def leak(self, page_id: int) -> None:
        if page_id in self.free_page_ids:
            raise ValueError(f"Page {page_id} is already free")
        self._leaked.append(page_id)

    def free_page(self, page_id: int) -> None:
        if page_id in self._leaked:
            raise ValueError(f"Page {page_id} is already free")
        super().free_page(page_id)



class TinyKvPagedCache(_ReferenceCache):
    def release(self) -> None:
        if self.page_ids:
            *kept, last = self.page_ids
            self.pool.leak(last)
            for page_id in kept:
                self.pool.free_page(page_id)
        self.page_ids, self.page_lens = [], []
