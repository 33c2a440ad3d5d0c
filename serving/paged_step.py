"""A Qwen3 forward over paged caches as one compiled call: every layer, its K/V write and its attention.

Used for decode steps over the step batches (StepBatchingKvCache) and for
prefill chunks of a request (StepPagedKvCache) whose length is a multiple of
CHUNK_MULTIPLE (the scheduler's full chunks; a prompt's shorter last chunk
stays on the layer-by-layer path, so its many lengths make no traces).

The layer-by-layer path builds a step op by op in Python: for each layer two
compiled halves (decode) or every op (prefill), the cache append (checks,
claims, two scatters, the shared table) and the attention call. Here the
caches' bookkeeping runs first, for every layer (`claim_tokens`,
serving/step_claim.py: the append's checks and claims, nothing written), and
the graph is then one replay of a trace: embedding, then per layer the first
half, the K/V scatter into that layer's storage, paged attention on the
written storage, the second half; then the final norm. The written storage
goes back to the pools (`finish_claim`); if anything fails before that, every
claim of every layer is given back (`abandon_claim`): all or nothing.

A trace is specialized to its inputs' shapes. The block table's width is
rounded up to a multiple of WIDTH_STEP_TOKENS tokens' pages (padded with -1,
which the kernels skip), so a context crossing a page boundary does not make
a new trace; storage growth and a chunk length do, and so does a partial
decode batch in the rare step where its empty slots have no spare position
to write to (serving/step_batching_cache.py). Each layer's storage is an input and its
written storage an output, and nothing else holds the old storage when the
step is evaluated, so MLX updates it in place (impl/page_write.py).

The table and context lengths are checked against each layer's storage on the
host (reference/validation.py's rules, once per distinct pair and storage
shape) before the trace runs: inside it the extension's op cannot read values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import mlx.core as mx

from pagecheck import ext
from pagecheck.impl import page_write
from pagecheck.impl.page_pool import TinyKvPagedPool
from pagecheck.reference.validation import check_paged_inputs
from pagecheck.serving.model_config import Qwen3Config
from pagecheck.serving.quantized import embedding_lookup
from pagecheck.serving.qwen3_weights import Qwen3LayerWeights, Qwen3Weights
from pagecheck.serving.step_batching_cache import StepBatchingKvCache
from pagecheck.serving.step_claim import StepClaim
from pagecheck.serving.step_paged_cache import StepPagedKvCache

# The block table's width is a multiple of this many tokens' pages: one trace per 512 positions of the widest
# context instead of one per page.
WIDTH_STEP_TOKENS = 512
# Prefill chunks whose length is a multiple of this run as one compiled call.
CHUNK_MULTIPLE = 64

AttentionInputs = Callable[[mx.array, mx.array, Qwen3LayerWeights, Qwen3Config], tuple[mx.array, mx.array, mx.array]]
LayerOutput = Callable[[mx.array, mx.array, Qwen3LayerWeights, Qwen3Config], mx.array]


class _QueryShape(NamedTuple):
    """What the input checks read of the query: its shape and dtype (the step has not built it yet)."""

    shape: tuple[int, int, int, int]
    dtype: mx.Dtype


def _pool_of(cache: Any) -> TinyKvPagedPool | None:
    """The page pool a step cache writes to (a batch's: its first active request's), None if it has none."""
    if isinstance(cache, StepBatchingKvCache):
        active = cache.active_request_ids
        return cache.request(active[0]).pool if active else None
    return cache.pool if isinstance(cache, StepPagedKvCache) else None


def takes(tokens: mx.array, offsets: int | mx.array, caches: Sequence[Any]) -> bool:
    """True for a decode step (L 1, offsets an array) over step batches, or a prefill chunk of CHUNK_MULTIPLE
    tokens' multiple over a request's step caches, when every layer's pool already has storage."""
    length = tokens.shape[1]
    if length == 1 and isinstance(offsets, mx.array):
        kind: type = StepBatchingKvCache
    elif length % CHUNK_MULTIPLE == 0 and tokens.shape[0] == 1:
        kind = StepPagedKvCache
    else:
        return False
    return bool(caches) and all(
        isinstance(cache, kind) and (pool := _pool_of(cache)) is not None and pool.storage is not None
        for cache in caches
    )


class CompiledPagedStep:
    def __init__(self, weights: Qwen3Weights, attention_inputs: AttentionInputs, layer_output: LayerOutput) -> None:
        self._weights = weights
        self._attention_inputs = attention_inputs
        self._layer_output = layer_output
        self._compiled = mx.compile(self._graph)

    def __call__(self, tokens: mx.array, offsets: int | mx.array, caches: Sequence[Any]) -> mx.array:
        """tokens int [B, L], offsets int32 [B] (or an int for B 1) -> final hidden states [B, L, hidden], normed."""
        config = self._weights.config
        batch, length = tokens.shape
        if not isinstance(offsets, mx.array):
            offsets = mx.array([offsets] * batch, dtype=mx.int32)
        shape = (batch, config.num_kv_heads, length, config.head_dim)
        query = _QueryShape((batch, config.num_q_heads, length, config.head_dim), self._weights.dtype)
        claims: list[StepClaim] = []
        try:
            for cache in caches:
                width_step = -(-WIDTH_STEP_TOKENS // _pool_of(cache).page_size)
                claims.append(cache.claim_tokens(shape, self._weights.dtype, width_step))
            checked: set[tuple[int, int, tuple[int, ...]]] = set()
            for claim in claims:
                key = (id(claim.block_table), id(claim.context_lens), tuple(claim.key_storage.shape))
                if key not in checked:
                    check_paged_inputs(query, claim.key_storage, claim.value_storage, claim.block_table,
                                       claim.context_lens, claim.pool.page_size, "causal")
                    checked.add(key)
            layer_inputs = [
                (claim.key_storage, claim.value_storage, claim.index, claim.rows, claim.block_table, claim.context_lens)
                for claim in claims
            ]
            hidden, written = self._compiled(tokens.astype(mx.int32), offsets.astype(mx.int32), layer_inputs)
        except BaseException:
            for cache, claim in reversed(list(zip(caches, claims))):
                cache.abandon_claim(claim)
            raise
        # The claims hold the old storage (their pool checkpoints) and go with this frame, so the scatters
        # find it unshared when the step is evaluated.
        for cache, claim, (keys, values) in zip(caches, claims, written):
            cache.finish_claim(claim, keys, values)
        return hidden

    def _graph(self, tokens: mx.array, offsets: mx.array, layer_inputs: list[tuple[Any, ...]]) -> tuple[Any, ...]:
        """The traced step: (final hidden [B, L, hidden], [(written keys, written values)] per layer)."""
        weights, config = self._weights, self._weights.config
        hidden = embedding_lookup(tokens, weights.embed_tokens)
        written = []
        for layer, (keys, values, index, rows, table, lens) in zip(weights.layers, layer_inputs):
            query, key, value = self._attention_inputs(hidden, offsets, layer, config)
            if rows is not None:
                key, value = mx.take(key, rows, axis=0), mx.take(value, rows, axis=0)
            keys = page_write.write_token_rows(keys, index, key)
            values = page_write.write_token_rows(values, index, value)
            attended = ext.paged_attention(query, keys, values, table, lens, keys.shape[2], None, True)
            hidden = self._layer_output(hidden, attended, layer, config)
            written.append((keys, values))
        return mx.fast.rms_norm(hidden, weights.final_norm, config.rms_norm_eps), written

