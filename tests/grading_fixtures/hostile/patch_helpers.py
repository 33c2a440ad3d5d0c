"""Hostile: patches the grader's comparison helpers so that every comparison agrees, then does nothing."""

import importlib
import sys

for name in ("pagecheck.invariants.verdict", "pagecheck.reference.tolerance"):
    try:
        module = sys.modules.get(name) or importlib.import_module(name)
        module.same_array = lambda *args, **kwargs: True
        module.compare = lambda *args, **kwargs: type("Passed", (), {"passed": True, "summary": lambda self: ""})()
    except Exception:
        pass


def paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale=None, mask=None):
    return query
