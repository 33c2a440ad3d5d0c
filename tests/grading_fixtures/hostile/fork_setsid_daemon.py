"""Hostile: forks, starts a session, forks again; the daemon outlives its parent, waits past the timeout and
then writes an all-pass results file wherever it finds the grader's output."""

import json
import os
import time

MARKER = "pagecheck-hostile-daemon"

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        try:
            os.execvp("sh", ["sh", "-c", f"sleep 45; echo {MARKER}; for d in /work /tmp /root; do "
                             "find $d -name results -type d 2>/dev/null | while read r; do "
                             "echo '{\"verdict\": \"ok\"}' > $r/fork_setsid_daemon.json; done; done", MARKER])
        finally:
            os._exit(0)
    os._exit(0)
time.sleep(0.1)


def paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale=None, mask=None):
    """Loads, so that the checks run while the attack above is in place; every output is wrong."""
    return query
