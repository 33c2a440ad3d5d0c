"""Mutant: row 0's context length is used for every row of the batch."""

import numpy as np

from pagecheck.reference.arrays import to_numpy
from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedCache, TinyKvPagedPool  # noqa: F401
from tests.mutants._overrides import attention_with

KILLED_BY = "batch_consistency"

paged_attention = attention_with(
    lambda a: {**a, "context_lens": np.full_like(to_numpy(a["context_lens"]), to_numpy(a["context_lens"])[0])}
)
