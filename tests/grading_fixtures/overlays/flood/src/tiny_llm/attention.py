"""Overlay on correct/: at import and on every call of paged_attention, writes megabytes to its output;
otherwise correct."""

import sys

from .honest_attention import paged_attention as _honest

sys.stdout.write(("flood " * 20000 + "\n") * 500)


def paged_attention(*args, **kwargs):
    sys.stderr.write("flood " * 200000 + "\n")
    return _honest(*args, **kwargs)
