"""Mutant: the batching cache pads block-table rows with page 0 instead of -1."""

from dataclasses import replace
from typing import Any

import numpy as np

from pagecheck.reference.batching_cache import BatchingKvCache as _ReferenceBatching
from pagecheck.reference.cache import PagedKvMetadata
from pagecheck.reference.subject import TinyKvPagedCache, TinyKvPagedPool, paged_attention  # noqa: F401

KILLED_BY = "batching_cache"


class BatchingKvCache(_ReferenceBatching):
    def paged_metadata(self, mask: Any = None) -> PagedKvMetadata:
        metadata = super().paged_metadata(mask)
        return replace(metadata, block_table=np.maximum(metadata.block_table, 0))
