"""Mutant: free_page checks ids against num_pages inclusively, so it takes back the id one past the last issued."""

import numpy as np

from pagecheck.reference.pool import TinyKvPagedPool as _ReferencePool
from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedCache, paged_attention  # noqa: F401

KILLED_BY = "rejection"


class TinyKvPagedPool(_ReferencePool):
    def _check_issued(self, page_id: int) -> None:
        if not isinstance(page_id, (int, np.integer)) or not 0 <= page_id <= self._num_issued:
            raise ValueError(f"page_id={page_id!r} was never issued by this pool ({self._num_issued} issued)")
