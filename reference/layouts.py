"""The one builder of paged layouts: pages, a shuffled block table, poisoned spare slots.

A layout scatters each request's logical positions over pages in a random,
non-contiguous order, leaves free pages in between, and fills every slot
that no request owns with NaN, so an implementation that reads a slot it
should not shows NaN instead of a plausible number. Values are rounded to the
target dtype up front, so the float64 reference and the subject see the very
same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np

from pagecheck.reference.arrays import to_numpy

DTYPES = ("float32", "bfloat16", "float16")


def round_to_dtype(x: np.ndarray, dtype: str) -> np.ndarray:
    """Round float values to `dtype` and return them as float32 (exact for all three dtypes)."""
    import mlx.core as mx

    return to_numpy(mx.array(x.astype(np.float32)).astype(getattr(mx, dtype)), np.float32)


@dataclass(frozen=True)
class PagedLayout:
    query: np.ndarray  # [B, H_q, L, D] float32, dtype-rounded
    key_pages: np.ndarray  # [P, H_kv, page_size, D], NaN in unowned slots
    value_pages: np.ndarray
    block_table: np.ndarray  # int32 [B, max_pages], -1 padded
    context_lens: np.ndarray  # int32 [B]
    page_size: int
    dtype: str
    mask: str | None = None

    def as_mx(self) -> dict[str, Any]:
        """Keyword arguments for a subject's paged_attention, as MLX arrays in the layout's dtype."""
        import mlx.core as mx

        dt = getattr(mx, self.dtype)
        return {
            "query": mx.array(self.query).astype(dt),
            "key_pages": mx.array(self.key_pages).astype(dt),
            "value_pages": mx.array(self.value_pages).astype(dt),
            "block_table": mx.array(self.block_table),
            "context_lens": mx.array(self.context_lens),
            "page_size": self.page_size,
            "mask": self.mask,
        }

    def reference_output(self, scale: float | None = None) -> np.ndarray:
        from pagecheck.reference.attention import paged_attention

        return paged_attention(
            self.query, self.key_pages, self.value_pages, self.block_table, self.context_lens,
            self.page_size, scale=scale, mask=self.mask,
        )

    def describe(self) -> str:
        """A short, readable statement of the layout for failure messages."""
        rows = "; ".join(
            f"ctx={int(n)} pages={_short_list([int(p) for p in row if p >= 0])}"
            for n, row in zip(self.context_lens, self.block_table)
        )
        return (
            f"dtype={self.dtype} page_size={self.page_size} P={self.key_pages.shape[0]} "
            f"H_q={self.query.shape[1]} H_kv={self.key_pages.shape[1]} L={self.query.shape[2]} "
            f"D={self.query.shape[3]} mask={self.mask} | {rows}"
        )

    def with_block_table(self, block_table: np.ndarray) -> "PagedLayout":
        return replace(self, block_table=np.asarray(block_table, dtype=np.int32))


def _short_list(items: list[int], keep: int = 8) -> str:
    """'[3, 0, 7]', or for long lists '[3, 0, ..., 7] (40 pages)' so a message stays readable."""
    if len(items) <= keep:
        return str(items)
    head = ", ".join(str(i) for i in items[: keep - 2])
    return f"[{head}, ..., {items[-1]}] ({len(items)} pages)"


# What the course's own tests leave past each context: finite values (its pools' storage, or stale tokens after a
# rewind), never NaN. Course-clause checks fill unused slots with this, so a kernel may read whole pages and mask
# by position; a kernel that reads them unmasked still gets a wrong answer. Beyond the course, NaN shows any read.
COURSE_UNUSED_FILL = 8.0


def random_layout(
    rng: np.random.Generator,
    *,
    context_lens: Sequence[int],
    page_size: int,
    num_queries: int = 1,
    num_q_heads: int = 4,
    num_kv_heads: int = 2,
    head_dim: int = 32,
    dtype: str = "float32",
    mask: str | None = None,
    spare_pages: int = 2,
    extra_columns: int = 1,
    logit_scale: float = 1.0,
    unused_fill: float = np.nan,
) -> PagedLayout:
    """Build a layout whose pages are shuffled across requests, with spare pages left poisoned.

    `extra_columns` widens the block table past the widest row, so -1 padding
    always appears; `logit_scale` multiplies queries to stress softmax stability.
    `unused_fill` fills every slot past a context and every spare page (NaN by
    default, so reading one shows; a finite value lets a kernel read and mask them).
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not one of {DTYPES}")
    lens = np.asarray(context_lens, dtype=np.int32)
    pages_per_row = [-(-int(n) // page_size) for n in lens]
    num_pages = sum(pages_per_row) + spare_pages
    width = max(pages_per_row, default=0) + extra_columns

    order = rng.permutation(num_pages)
    table = np.full((len(lens), width), -1, dtype=np.int32)
    key_pages = np.full((num_pages, num_kv_heads, page_size, head_dim), unused_fill, dtype=np.float32)
    value_pages = np.full_like(key_pages, unused_fill)
    cursor = 0
    for b, (n, count) in enumerate(zip(lens, pages_per_row)):
        ids = order[cursor : cursor + count]
        cursor += count
        table[b, :count] = ids
        for col, page in enumerate(ids):
            used = min(page_size, int(n) - col * page_size)
            key_pages[page, :, :used] = round_to_dtype(rng.standard_normal((num_kv_heads, used, head_dim)), dtype)
            value_pages[page, :, :used] = round_to_dtype(rng.standard_normal((num_kv_heads, used, head_dim)), dtype)
    query = round_to_dtype(
        logit_scale * rng.standard_normal((len(lens), num_q_heads, num_queries, head_dim)), dtype
    )
    return PagedLayout(query, key_pages, value_pages, table, lens, page_size, dtype, mask)
