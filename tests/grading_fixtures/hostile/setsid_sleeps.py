"""Hostile: at import, starts 100 `setsid sleep` processes meant to outlive the grader."""

import subprocess

MARKER = "86400.25"
for _ in range(100):
    try:
        subprocess.Popen(["setsid", "sleep", MARKER], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        break
