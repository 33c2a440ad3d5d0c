"""Mutant: a new page is allocated as soon as the tail fills, one token before it is needed."""

from typing import Any

from pagecheck.reference.cache import TinyKvPagedCache as _ReferenceCache
from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedPool, paged_attention  # noqa: F401

KILLED_BY = "lazy_tail"


class TinyKvPagedCache(_ReferenceCache):
    def append(self, key: Any, value: Any) -> None:
        super().append(key, value)
        if self.page_lens and self.page_lens[-1] == self.pool.page_size:
            self.page_ids.append(self.pool.allocate_page())
            self.page_lens.append(0)
