"""What a layer's cache hands a compiled serving step: positions claimed for K/V the step's graph will write.

A step compiled as one call (serving/paged_step.py) cannot append to the
caches while its graph is built, so each layer's cache appends in two halves:
`claim_tokens` runs the append's checks and claims the positions (the counts
include the tokens at once, nothing is written), and then either
`finish_claim` takes the storage the graph wrote or `abandon_claim` puts the
cache and its pool back as they were. The step batch (decode) and the
request's own cache (prefill chunks) both claim this way.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import mlx.core as mx

from pagecheck.impl import page_write
from pagecheck.impl.page_pool import TinyKvPagedPool


class StepClaim(NamedTuple):
    pool: TinyKvPagedPool
    undo: Any  # what abandon_claim needs to put the cache and the pool back (the cache's own business)
    # Where the R rows of T tokens of K/V [R, H_kv, T, D] go in storage (page_write.token_row_index).
    index: page_write.TokenRowIndex
    rows: mx.array | None  # int32 [R], the K/V row each written row takes; None: every row its own
    key_storage: mx.array  # the storage to write into, [capacity, H_kv, page_size, D]
    value_storage: mx.array
    block_table: mx.array  # int32 [R, width], -1 padded: the metadata paged attention reads after the write
    context_lens: mx.array  # int32 [R]
