"""Mutant: the last page is read whole, unwritten tail slots included."""

from pagecheck.reference.arrays import to_numpy
from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedCache, TinyKvPagedPool  # noqa: F401
from tests.mutants._overrides import attention_with

KILLED_BY = "page_boundaries"

paged_attention = attention_with(
    lambda a: {**a, "context_lens": -(-to_numpy(a["context_lens"]) // a["page_size"]) * a["page_size"]}
)
