"""Mutant: block_table() is cached under the page count, so a table survives a change of page ids at that count."""

from typing import Any

from pagecheck.reference.cache import TinyKvPagedCache as _ReferenceCache
from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedPool, paged_attention  # noqa: F401

KILLED_BY = "block_table_order"


class TinyKvPagedCache(_ReferenceCache):
    def __init__(self, pool: TinyKvPagedPool) -> None:
        super().__init__(pool)
        self._tables: dict[tuple[int, int | None], Any] = {}

    def block_table(self, max_pages: int | None = None) -> Any:
        key = (self.num_pages, max_pages)
        if key not in self._tables:
            self._tables[key] = super().block_table(max_pages)
        return self._tables[key]
