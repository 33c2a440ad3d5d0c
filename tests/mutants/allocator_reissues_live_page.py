"""Mutant: allocate_page hands out the most recently freed id but leaves it on the free list."""

from pagecheck.reference.pool import TinyKvPagedPool as _ReferencePool
from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedCache, paged_attention  # noqa: F401

KILLED_BY = "alias_free"


class TinyKvPagedPool(_ReferencePool):
    def allocate_page(self) -> int:
        if self._free:
            return self._free[-1]
        return super().allocate_page()
