"""Hostile: at import, starts 100 `setsid sleep` processes meant to outlive the grader."""

import subprocess

MARKER = "86400.25"
for _ in range(100):
    try:
        subprocess.Popen(["setsid", "sleep", MARKER], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        break


def paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale=None, mask=None):
    """Loads, so that the checks run while the attack above is in place; every output is wrong."""
    return query
