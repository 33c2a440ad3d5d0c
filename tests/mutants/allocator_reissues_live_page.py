"""Mutant: allocate_page hands out the most recently freed id but leaves it on the free list.

Its reads and writes check only that an id was issued, not that it is live
(a pool that trusts its caches), so the reissued page is written and a second
request can be handed the same page.
"""

from pagecheck.reference.pool import TinyKvPagedPool as _ReferencePool
from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedCache, paged_attention  # noqa: F401

KILLED_BY = "alias_free"


class TinyKvPagedPool(_ReferencePool):
    def allocate_page(self) -> int:
        if self._free:
            return self._free[-1]
        return super().allocate_page()

    def _check_live(self, page_id: int) -> None:
        self._check_issued(page_id)
