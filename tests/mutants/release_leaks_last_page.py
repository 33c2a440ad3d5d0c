"""Mutant: release returns every page but the last one."""

from pagecheck.reference.cache import TinyKvPagedCache as _ReferenceCache
from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedPool, paged_attention  # noqa: F401

KILLED_BY = "release_once"


class TinyKvPagedCache(_ReferenceCache):
    def release(self) -> None:
        for page_id in self.page_ids[:-1]:
            self.pool.free_page(page_id)
        self.page_ids, self.page_lens = [], []
