"""Mutant: a write that runs past the page end stores the part that fits before it is rejected."""

from typing import Any

from pagecheck.reference.pool import TinyKvPagedPool as _ReferencePool
from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedCache, paged_attention  # noqa: F401

KILLED_BY = "rejection"


class TinyKvPagedPool(_ReferencePool):
    def write_page_slice(self, page_id: int, start: int, key: Any, value: Any) -> None:
        room = self.page_size - start
        if 0 < room < key.shape[2]:
            super().write_page_slice(page_id, start, key[:, :, :room], value[:, :, :room])
        super().write_page_slice(page_id, start, key, value)
