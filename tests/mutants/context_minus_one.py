"""Mutant: attention stops one token short of each row's context."""

import numpy as np

from pagecheck.reference.arrays import to_numpy
from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedCache, TinyKvPagedPool  # noqa: F401
from tests.mutants._overrides import attention_with

KILLED_BY = "context_len"

paged_attention = attention_with(lambda a: {**a, "context_lens": np.maximum(to_numpy(a["context_lens"]) - 1, 0)})
