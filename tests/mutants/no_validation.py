"""Mutant: paged_attention skips the input contract and runs the oracle on anything."""

from pagecheck.reference.attention import paged_attention  # noqa: F401
from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedCache, TinyKvPagedPool  # noqa: F401

KILLED_BY = "rejection"
