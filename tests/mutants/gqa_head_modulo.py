"""Mutant: query head h reads kv head h % H_kv instead of h // (H_q / H_kv)."""

from typing import Any

import numpy as np

from reference.attention import dense_attention, gather_dense
from reference.subject import BatchingKvCache, TinyKvPagedCache, TinyKvPagedPool  # noqa: F401
from reference.validation import check_paged_inputs

KILLED_BY = "gqa_mapping"


def paged_attention(
    query: Any, key_pages: Any, value_pages: Any, block_table: Any, context_lens: Any, page_size: int,
    scale: float | None = None, mask: str | None = None,
) -> np.ndarray:
    check_paged_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask)
    keys, values = gather_dense(key_pages, value_pages, block_table, context_lens, page_size)
    # Tiling kv heads H_q / H_kv times gives head h the copy of kv head h % H_kv.
    repeats = (1, query.shape[1] // keys.shape[1], 1, 1)
    return dense_attention(
        query, np.tile(keys, repeats), np.tile(values, repeats), scale=scale, mask=mask, context_lens=context_lens
    )
