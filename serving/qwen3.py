"""A Qwen3 decoder in MLX: quantized token embedding, RMSNorm, rotary q/k with q/k norm,
grouped-query attention over a KV cache, SwiGLU MLP, tied output head.

`Qwen3Model(weights, attention_path)` runs `tokens [B, L]` whose positions
start at `offsets` (an int, or int32 [B] for a batch whose rows sit at
different positions), appending their K/V to one cache per layer. It returns
the final hidden states; `logits` turns the ones that are sampled into
float32 vocabulary scores, so a prefill chunk never pays for the output head
of every position.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import mlx.core as mx

from pagecheck.serving.kv_traffic import KvTraffic
from pagecheck.serving.model_config import Qwen3Config
from pagecheck.serving.quantized import embedding_lookup, quantized_linear
from pagecheck.serving.qwen3_attention import check_attention_path, qwen3_attention
from pagecheck.serving.qwen3_weights import Qwen3LayerWeights, Qwen3Weights


class Qwen3Model:
    def __init__(self, weights: Qwen3Weights, attention_path: str = "paged") -> None:
        check_attention_path(attention_path)
        self.weights = weights
        self.attention_path = attention_path

    @property
    def config(self) -> Qwen3Config:
        return self.weights.config

    @property
    def dtype(self) -> mx.Dtype:
        return self.weights.dtype

    def __call__(
        self,
        tokens: mx.array,
        offsets: int | mx.array,
        caches: Sequence[Any],
        traffic: KvTraffic | None = None,
    ) -> mx.array:
        """tokens int [B, L] -> final hidden states [B, L, hidden]."""
        if tokens.ndim != 2:
            raise ValueError(f"tokens shape={tuple(tokens.shape)} must be [B, L]")
        if len(caches) != self.config.num_layers:
            raise ValueError(f"caches has {len(caches)} entries; the model has {self.config.num_layers} layers")
        traffic = KvTraffic() if traffic is None else traffic
        config = self.config
        hidden = embedding_lookup(tokens, self.weights.embed_tokens)
        for layer, cache in zip(self.weights.layers, caches):
            attention_in = mx.fast.rms_norm(hidden, layer.input_norm, config.rms_norm_eps)
            hidden = hidden + qwen3_attention(
                attention_in, offsets, cache, layer, config, self.attention_path, traffic
            )
            mlp_in = mx.fast.rms_norm(hidden, layer.post_attention_norm, config.rms_norm_eps)
            hidden = hidden + _swiglu_mlp(mlp_in, layer)
        return mx.fast.rms_norm(hidden, self.weights.final_norm, config.rms_norm_eps)

    def logits(self, hidden: mx.array) -> mx.array:
        """hidden [..., hidden] -> float32 [..., vocab] through the tied embedding."""
        return quantized_linear(hidden, self.weights.embed_tokens).astype(mx.float32)


def _swiglu_mlp(x: mx.array, layer: Qwen3LayerWeights) -> mx.array:
    gate_up = quantized_linear(x, layer.gate_up_proj)
    split = layer.intermediate
    return quantized_linear(_silu_product(gate_up[..., :split], gate_up[..., split:]), layer.down_proj)


# One fused kernel for the three elementwise ops. Shapeless: prefill chunks come in many lengths, and a
# compile per shape would JIT a new kernel for each.
@partial(mx.compile, shapeless=True)
def _silu_product(gate: mx.array, up: mx.array) -> mx.array:
    """silu(gate) * up."""
    return mx.sigmoid(gate) * gate * up
