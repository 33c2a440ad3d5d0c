"""What most attention mutants share: the reference's own validation, then the oracle on altered inputs.

A mutant changes the inputs the float64 oracle sees after the contract's
checks have passed, so the planted bug is the only difference from the
reference subject. The oracle module itself is never patched: the checks
compare against it.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from reference import attention
from reference.validation import check_paged_inputs

Inputs = dict[str, Any]


def attention_with(alter: Callable[[Inputs], Inputs]) -> Callable[..., np.ndarray]:
    """A paged_attention that validates like the reference, then runs the oracle on alter(inputs)."""

    def paged_attention(
        query: Any,
        key_pages: Any,
        value_pages: Any,
        block_table: Any,
        context_lens: Any,
        page_size: int,
        scale: float | None = None,
        mask: str | None = None,
    ) -> np.ndarray:
        check_paged_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask)
        inputs = dict(
            query=query, key_pages=key_pages, value_pages=value_pages, block_table=block_table,
            context_lens=context_lens, page_size=page_size, scale=scale, mask=mask,
        )
        return attention.paged_attention(**alter(inputs))

    return paged_attention
