"""Mutant: the default scale is 1/D instead of D**-0.5."""

from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedCache, TinyKvPagedPool  # noqa: F401
from tests.mutants._overrides import attention_with

KILLED_BY = "head_dims"

paged_attention = attention_with(
    lambda a: {**a, "scale": 1.0 / a["query"].shape[3] if a["scale"] is None else a["scale"]}
)
