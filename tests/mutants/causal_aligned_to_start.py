"""Mutant: the causal mask treats the queries as the FIRST L positions (row l sees keys 0..l)."""

import numpy as np

from pagecheck.reference.arrays import to_numpy
from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedCache, TinyKvPagedPool  # noqa: F401
from tests.mutants._overrides import Inputs, attention_with

KILLED_BY = "dispatch_paths"


def _align_to_start(a: Inputs) -> Inputs:
    if a["mask"] != "causal":
        return a
    # With the context cut to L, the oracle's "last L positions" are the first L.
    lens = to_numpy(a["context_lens"])
    return {**a, "context_lens": np.where(lens > 0, a["query"].shape[2], 0)}


paged_attention = attention_with(_align_to_start)
