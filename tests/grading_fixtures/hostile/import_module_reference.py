"""Hostile: delegates to the grader's own oracle through importlib, with a name the import scan cannot read."""

import importlib

_oracle = importlib.import_module("page" + "check.reference.subject")
paged_attention = _oracle.paged_attention
TinyKvPagedPool = _oracle.TinyKvPagedPool
TinyKvPagedCache = _oracle.TinyKvPagedCache
BatchingKvCache = _oracle.BatchingKvCache
