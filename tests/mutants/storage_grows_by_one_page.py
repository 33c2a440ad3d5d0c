"""Mutant: full page storage grows by the one page needed instead of doubling, copying every page each time."""

import numpy as np

from pagecheck.reference.pool import TinyKvPagedPool as _ReferencePool
from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedCache, paged_attention  # noqa: F401

KILLED_BY = "page_storage"


class TinyKvPagedPool(_ReferencePool):
    def _grow(self, needed: int) -> None:
        old_k, old_v = self._keys, self._values
        self._keys = np.concatenate([old_k, np.full((needed - old_k.shape[0], *old_k.shape[1:]), np.nan)])
        self._values = np.concatenate([old_v, np.full((needed - old_v.shape[0], *old_v.shape[1:]), np.nan)])
        self.storage_growths += 1
        self.copied_pages_on_growth += old_k.shape[0]
        self.copied_bytes_on_growth += old_k.nbytes + old_v.nbytes
