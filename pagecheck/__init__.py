"""pagecheck: tests, references and benchmarks for paged attention and paged KV-cache allocation."""

import os as _os
import sys as _sys

# `python -m pagecheck.MODULE` puts the current folder first on sys.path before any of pagecheck runs: a
# secrets.py or json.py there (a student's, in a folder of submissions) would stand in for the standard library's
# in pagecheck's own process. While `-m` is still argv[0] (the package is imported before its module runs) the
# entry comes off; pagecheck.cli puts the folder back, last, for the commands that take a module subject from it.
if _sys.argv[:1] == ["-m"] and _sys.path and _sys.path[0] in ("", _os.getcwd()):
    del _sys.path[0]
