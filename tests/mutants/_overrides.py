"""What the attention mutants share: the reference's own validation, then a planted bug.

`attention_with` runs the float64 oracle on altered inputs; `dense_mutant`
hands a mutant's own attention math the validated, gathered dense K/V. Either
way the contract's checks run first, so the planted bug is the only
difference from the reference subject. The oracle module itself is never
patched: the checks compare against it.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from pagecheck.reference import attention
from pagecheck.reference.arrays import to_numpy
from pagecheck.reference.validation import check_paged_inputs

Inputs = dict[str, Any]
# (query float64 [B,H_q,L,D], keys and values float64 [B,H_kv,S,D], context_lens, scale, mask) -> output
DenseAttention = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float, str | None], np.ndarray]


def _validated(body: Callable[[Inputs], np.ndarray]) -> Callable[..., np.ndarray]:
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
        return body(
            dict(
                query=query, key_pages=key_pages, value_pages=value_pages, block_table=block_table,
                context_lens=context_lens, page_size=page_size, scale=scale, mask=mask,
            )
        )

    return paged_attention


def attention_with(alter: Callable[[Inputs], Inputs]) -> Callable[..., np.ndarray]:
    """A paged_attention that validates like the reference, then runs the oracle on alter(inputs)."""
    return _validated(lambda inputs: attention.paged_attention(**alter(inputs)))


def dense_mutant(attend: DenseAttention) -> Callable[..., np.ndarray]:
    """A paged_attention that validates and gathers like the reference, then computes with `attend`."""

    def body(a: Inputs) -> np.ndarray:
        keys, values = attention.gather_dense(
            a["key_pages"], a["value_pages"], a["block_table"], a["context_lens"], a["page_size"]
        )
        query = to_numpy(a["query"], np.float64)
        scale = query.shape[3] ** -0.5 if a["scale"] is None else a["scale"]
        return attend(query, keys, values, to_numpy(a["context_lens"]), scale, a["mask"])

    return _validated(body)
