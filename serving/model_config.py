"""Qwen3 decoder geometry: the public dimensions of three released sizes, and a CPU-sized one.

The released configs share vocab 151936, head_dim 128, rope theta 1e6, RMS eps
1e-6, tied input/output embeddings and a context of 40960 positions
(max_position_embeddings). `qwen3-tiny` keeps qwen3-0.6b's
attention geometry (16 query heads, 8 KV heads, head_dim 128), so its K/V
bytes per token and layer equal the real model's, and shrinks everything the
KV cache does not see (hidden size, MLP, vocabulary) so a CPU run of a whole
serving trace takes minutes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import mlx.core as mx

QWEN3_VOCAB_SIZE = 151936
QWEN3_HEAD_DIM = 128
QWEN3_ROPE_THETA = 1e6
QWEN3_RMS_NORM_EPS = 1e-6
QWEN3_MAX_CONTEXT = 40960


@dataclass(frozen=True)
class Qwen3Config:
    name: str
    hidden_size: int
    num_layers: int
    num_q_heads: int
    num_kv_heads: int
    intermediate_size: int
    vocab_size: int = QWEN3_VOCAB_SIZE
    head_dim: int = QWEN3_HEAD_DIM
    rope_theta: float = QWEN3_ROPE_THETA
    rms_norm_eps: float = QWEN3_RMS_NORM_EPS
    tie_word_embeddings: bool = True
    max_context: int = QWEN3_MAX_CONTEXT  # positions a request may hold, prompt and output together

    def with_layers(self, num_layers: int) -> Qwen3Config:
        """The same geometry with the first `num_layers` layers only."""
        if not isinstance(num_layers, int) or isinstance(num_layers, bool) or num_layers <= 0:
            raise ValueError(f"num_layers must be a positive int, got {num_layers!r}")
        return replace(self, num_layers=num_layers)

    def kv_bytes_per_token(self, dtype: mx.Dtype) -> int:
        """K and V of one token in every layer."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype.size


QWEN3_CONFIGS: dict[str, Qwen3Config] = {
    config.name: config
    for config in (
        Qwen3Config("qwen3-0.6b", hidden_size=1024, num_layers=28, num_q_heads=16, num_kv_heads=8,
                    intermediate_size=3072),
        Qwen3Config("qwen3-1.7b", hidden_size=2048, num_layers=28, num_q_heads=16, num_kv_heads=8,
                    intermediate_size=6144),
        Qwen3Config("qwen3-4b", hidden_size=2560, num_layers=36, num_q_heads=32, num_kv_heads=8,
                    intermediate_size=9728),
        Qwen3Config("qwen3-tiny", hidden_size=128, num_layers=2, num_q_heads=16, num_kv_heads=8,
                    intermediate_size=384, vocab_size=4096),
    )
}


def model_config(name: str, num_layers: int | None = None) -> Qwen3Config:
    """A named config, optionally cut to its first `num_layers` layers."""
    if name not in QWEN3_CONFIGS:
        raise ValueError(f"model={name!r} is not one of {sorted(QWEN3_CONFIGS)}")
    config = QWEN3_CONFIGS[name]
    if num_layers is not None and isinstance(num_layers, int) and num_layers > config.num_layers:
        raise ValueError(f"layers={num_layers} is more than the {config.num_layers} layers of {name}")
    return config if num_layers is None else config.with_layers(num_layers)
