"""Seeded random Qwen3 weights, every matrix quantized with mx.quantize (nothing is downloaded).

Linear layers and the token embedding are quantized (default 4 bits, groups of
128); the embedding doubles as the output head (tied). A layer stores the q, k
and v projections as one matrix of stacked rows, and the gate and up
projections as another, each read with one matmul; the single projections
are views of those rows. (The stacked q|k|v output goes to the extension's
qk_norm_rope, which splits it into heads itself: sliced in MLX, q and k
would be strided and their norms would copy them.) Norm weights stay in the
activation dtype. Each matrix is drawn from its own key split off the
seed, then quantized and evaluated before the next is drawn, so generating a
large model never holds more than one float matrix at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import mlx.core as mx

from pagecheck.serving.model_config import Qwen3Config
from pagecheck.serving.quantized import (
    DEFAULT_BITS,
    DEFAULT_GROUP_SIZE,
    QuantizedMatrix,
    quantize_matrix,
    stack_rows,
)

# Small enough that the residual stream stays in range through random layers.
INIT_STD = 0.02
NORM_JITTER = 0.05


@dataclass(frozen=True)
class Qwen3LayerWeights:
    input_norm: mx.array  # [hidden]
    qkv_proj: QuantizedMatrix  # [(H_q + 2 H_kv) * D, hidden]: q rows, then k rows, then v rows
    o_proj: QuantizedMatrix  # [hidden, H_q * D]
    q_norm: mx.array  # [D]
    k_norm: mx.array  # [D]
    post_attention_norm: mx.array  # [hidden]
    gate_up_proj: QuantizedMatrix  # [2 * intermediate, hidden]: gate rows, then up rows
    down_proj: QuantizedMatrix  # [hidden, intermediate]

    def arrays(self) -> dict[str, Any]:
        """Every array of the layer as a tree mx.compile takes: a norm as itself, a matrix as
        (weight, scales, biases). `from_arrays` inverts it."""
        return {
            field.name: value if isinstance(value, mx.array) else (value.weight, value.scales, value.biases)
            for field in fields(self)
            for value in (getattr(self, field.name),)
        }

    def from_arrays(self, arrays: dict[str, Any]) -> Qwen3LayerWeights:
        """A layer of this one's shape made of `arrays` (a tree from `arrays()`, or its traced stand-in
        inside mx.compile); group sizes and bit widths are this layer's."""
        parts = {}
        for field in fields(self):
            mine = getattr(self, field.name)
            given = arrays[field.name]
            parts[field.name] = given if isinstance(mine, mx.array) else QuantizedMatrix(
                weight=given[0], scales=given[1], biases=given[2], group_size=mine.group_size, bits=mine.bits
            )
        return Qwen3LayerWeights(**parts)

    def quantization(self) -> tuple[tuple[int, int], ...]:
        """(group_size, bits) of each matrix, in field order: layers that agree can share one trace."""
        return tuple(
            (value.group_size, value.bits)
            for field in fields(self)
            for value in (getattr(self, field.name),)
            if isinstance(value, QuantizedMatrix)
        )

    @property
    def intermediate(self) -> int:
        return self.down_proj.shape[1]

    @property
    def q_width(self) -> int:
        return self.o_proj.shape[1]

    @property
    def kv_width(self) -> int:
        return (self.qkv_proj.shape[0] - self.q_width) // 2

    @property
    def q_proj(self) -> QuantizedMatrix:
        return self.qkv_proj.row_range(0, self.q_width)

    @property
    def k_proj(self) -> QuantizedMatrix:
        return self.qkv_proj.row_range(self.q_width, self.q_width + self.kv_width)

    @property
    def v_proj(self) -> QuantizedMatrix:
        return self.qkv_proj.row_range(self.q_width + self.kv_width, self.q_width + 2 * self.kv_width)

    @property
    def gate_proj(self) -> QuantizedMatrix:
        return self.gate_up_proj.row_range(0, self.intermediate)

    @property
    def up_proj(self) -> QuantizedMatrix:
        return self.gate_up_proj.row_range(self.intermediate, 2 * self.intermediate)


@dataclass(frozen=True)
class Qwen3Weights:
    config: Qwen3Config
    dtype: mx.Dtype
    embed_tokens: QuantizedMatrix  # [vocab, hidden], also the output head
    layers: tuple[Qwen3LayerWeights, ...]
    final_norm: mx.array  # [hidden]

    @property
    def nbytes(self) -> int:
        total = self.embed_tokens.nbytes + self.final_norm.nbytes
        for layer in self.layers:
            for value in vars(layer).values():
                total += value.nbytes
        return total


class _Draws:
    """Hands out one fresh key per tensor, in a fixed order, from one seed."""

    def __init__(self, seed: int, dtype: mx.Dtype, group_size: int, bits: int) -> None:
        self._key = mx.random.key(seed)
        self.dtype = dtype
        self.group_size = group_size
        self.bits = bits

    def _next_key(self) -> mx.array:
        self._key, key = mx.random.split(self._key)
        return key

    def matrix(self, rows: int, cols: int) -> QuantizedMatrix:
        w = (INIT_STD * mx.random.normal((rows, cols), key=self._next_key())).astype(self.dtype)
        quantized = quantize_matrix(w, group_size=self.group_size, bits=self.bits)
        mx.eval(quantized.weight, quantized.scales, quantized.biases)
        return quantized

    def stacked(self, shapes: list[tuple[int, int]]) -> QuantizedMatrix:
        """Matrices drawn one after another (as `matrix` would), stored as one of stacked rows."""
        stacked = stack_rows([self.matrix(rows, cols) for rows, cols in shapes])
        mx.eval(stacked.weight, stacked.scales, stacked.biases)
        return stacked

    def norm(self, size: int) -> mx.array:
        weight = (1.0 + NORM_JITTER * mx.random.normal((size,), key=self._next_key())).astype(self.dtype)
        mx.eval(weight)
        return weight


def random_qwen3_weights(
    config: Qwen3Config,
    seed: int = 0,
    dtype: mx.Dtype = mx.bfloat16,
    group_size: int = DEFAULT_GROUP_SIZE,
    bits: int = DEFAULT_BITS,
) -> Qwen3Weights:
    if not config.tie_word_embeddings:
        raise ValueError(f"config {config.name!r} has untied embeddings; only tied output heads are built")
    draws = _Draws(seed, dtype, group_size, bits)
    hidden, head_dim = config.hidden_size, config.head_dim
    q_width, kv_width = config.num_q_heads * head_dim, config.num_kv_heads * head_dim
    embed_tokens = draws.matrix(config.vocab_size, hidden)
    layers = tuple(
        Qwen3LayerWeights(
            input_norm=draws.norm(hidden),
            qkv_proj=draws.stacked([(q_width, hidden), (kv_width, hidden), (kv_width, hidden)]),
            o_proj=draws.matrix(hidden, q_width),
            q_norm=draws.norm(head_dim),
            k_norm=draws.norm(head_dim),
            post_attention_norm=draws.norm(hidden),
            gate_up_proj=draws.stacked([(config.intermediate_size, hidden)] * 2),
            down_proj=draws.matrix(hidden, config.intermediate_size),
        )
        for _ in range(config.num_layers)
    )
    return Qwen3Weights(
        config=config, dtype=dtype, embed_tokens=embed_tokens, layers=layers, final_norm=draws.norm(hidden)
    )
