"""Mutant: decode walks keys in chunks of 32 and drops a final partial chunk."""

from pagecheck.reference.arrays import to_numpy
from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedCache, TinyKvPagedPool  # noqa: F401
from tests.mutants._overrides import Inputs, attention_with

KILLED_BY = "page_boundaries"
CHUNK = 32


def _drop_remainder(a: Inputs) -> Inputs:
    if a["query"].shape[2] != 1:
        return a
    return {**a, "context_lens": to_numpy(a["context_lens"]) // CHUNK * CHUNK}


paged_attention = attention_with(_drop_remainder)
