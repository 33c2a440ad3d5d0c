"""Mutant: rewind to a whole number of pages records the new tail page as holding offset % page_size = 0 tokens."""

from pagecheck.reference.cache import TinyKvPagedCache as _ReferenceCache
from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedPool, paged_attention  # noqa: F401

KILLED_BY = "context_len"


class TinyKvPagedCache(_ReferenceCache):
    def rewind(self, n: int) -> None:
        if not isinstance(n, int) or not 0 <= n <= self.offset:
            raise ValueError(f"rewind n={n!r} must be an int in [0, {self.offset}]")
        remaining = self.offset - n
        keep = -(-remaining // self.pool.page_size)
        for page_id in reversed(self.page_ids[keep:]):
            self.pool.free_page(page_id)
        del self.page_ids[keep:], self.page_lens[keep:]
        if keep:
            self.page_lens[-1] = remaining % self.pool.page_size
