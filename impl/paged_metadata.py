"""What a paged-attention kernel reads after a cache append: pages plus the page table."""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx


@dataclass(frozen=True)
class PagedKvMetadata:
    """Read-side metadata for one attention call.

    key_pages / value_pages are the pool's storage for the pages issued so far,
    [num_pages, H_kv, page_size, D]. block_table is int32 [B, max_pages] with -1
    past each row's pages; context_lens is int32 [B]. The arrays are views of
    the pool's storage: holding them across the next append makes that append
    copy the whole pool (see TinyKvPagedPool).
    """

    key_pages: mx.array
    value_pages: mx.array
    block_table: mx.array
    context_lens: mx.array
    page_size: int
    mask: mx.array | str | None = None
