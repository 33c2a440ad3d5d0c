"""Hostile: a file named reference.py, so the import scan takes `reference` for the submission's own module,
while at run time the name resolved to the grader's oracle."""

from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedCache, TinyKvPagedPool, paged_attention  # noqa: F401
