"""Mutant: an append whose later page write fails keeps the pages and tokens it had already taken."""

from typing import Any

from pagecheck.reference.cache import TinyKvPagedCache as _ReferenceCache
from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedPool, paged_attention  # noqa: F401

KILLED_BY = "rejection"


class TinyKvPagedCache(_ReferenceCache):
    def append(self, key: Any, value: Any) -> None:
        self.pool._check_chunk(key, value)
        length = key.shape[2]
        written = 0
        while written < length:
            if not self.page_ids or self.page_lens[-1] == self.pool.page_size:
                self.page_ids.append(self.pool.allocate_page())
                self.page_lens.append(0)
            start = self.page_lens[-1]
            take = min(self.pool.page_size - start, length - written)
            self.pool.write_page_slice(
                self.page_ids[-1], start, key[:, :, written : written + take], value[:, :, written : written + take]
            )
            self.page_lens[-1] += take
            written += take
