"""A Qwen3 decoder in MLX: quantized token embedding, RMSNorm, rotary q/k with q/k norm,
grouped-query attention over a KV cache, SwiGLU MLP, tied output head.

`Qwen3Model(weights, attention_path)` runs `tokens [B, L]` whose positions
start at `offsets` (an int, or int32 [B] for a batch whose rows sit at
different positions), appending their K/V to one cache per layer. It returns
the final hidden states; `logits` turns the ones that are sampled into
float32 vocabulary scores, so a prefill chunk never pays for the output head
of every position.

A decode step (L == 1, offsets an int32 array) computes each layer's dense
work in two compiled calls, one before the cache append and attention and one
after, traced once per layer shape: the same operations as the eager path
(bit-for-bit the same outputs, tests/test_qwen3_model.py), with one Python call
for each half instead of one per operation, which halves the host time those
operations take to build. `compile_decode=False` keeps every step eager, for
comparison. On the paged path with the serving stack's step caches
(serving/step_batching_cache.py, serving/step_paged_cache.py), a decode step
and a full prefill chunk are instead one compiled call over every layer, K/V
writes included (serving/paged_step.py); `whole_step=False` keeps the
layer-by-layer build there too.

Otherwise prefill chunks run eager. Their layer halves compiled per chunk were
far slower on the H200 (a prefill profile the eager model ran in about 11 s had
not finished in 55 s; ext/kernels/NOTES.md v15): a trace is shape-specialized
(the chunk's int offset was a constant of it), so every chunk traced anew, and
on the GPU a new fused kernel is a JIT compile. The whole-step trace takes the
offsets as an array and is kept per chunk length, table width step and storage
size.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import mlx.core as mx

from pagecheck.serving.kv_traffic import KvTraffic
from pagecheck.serving.model_config import Qwen3Config
from pagecheck.serving import paged_step
from pagecheck.serving.quantized import embedding_lookup, quantized_linear
from pagecheck.serving.qwen3_attention import attend, check_attention_path, output_projection, project_qkv
from pagecheck.serving.qwen3_weights import Qwen3LayerWeights, Qwen3Weights


class Qwen3Model:
    def __init__(
        self, weights: Qwen3Weights, attention_path: str = "paged", compile_decode: bool = True,
        whole_step: bool = True,
    ) -> None:
        check_attention_path(attention_path)
        for name, value in (("compile_decode", compile_decode), ("whole_step", whole_step)):
            if not isinstance(value, bool):
                raise ValueError(f"{name} must be a bool, got {value!r}")
        self.weights = weights
        self.attention_path = attention_path
        self._compiled = _CompiledLayerHalves(weights) if compile_decode else None
        use_step = compile_decode and whole_step and attention_path == "paged"
        self._whole_step = paged_step.CompiledPagedStep(weights, attention_inputs, layer_output) if use_step else None

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
        if self._whole_step is not None and paged_step.takes(tokens, offsets, caches):
            return self._whole_step(tokens, offsets, caches)
        compiled = self._compiled if tokens.shape[1] == 1 and isinstance(offsets, mx.array) else None
        hidden = embedding_lookup(tokens, self.weights.embed_tokens)
        for index, (layer, cache) in enumerate(zip(self.weights.layers, caches)):
            if compiled is None:
                query, key, value = attention_inputs(hidden, offsets, layer, config)
            else:
                query, key, value = compiled.attention_inputs(index, hidden, offsets)
            attended = attend(query, key, value, cache, self.attention_path, traffic)
            if compiled is None:
                hidden = layer_output(hidden, attended, layer, config)
            else:
                hidden = compiled.layer_output(index, hidden, attended)
        return mx.fast.rms_norm(hidden, self.weights.final_norm, config.rms_norm_eps)

    def logits(self, hidden: mx.array) -> mx.array:
        """hidden [..., hidden] -> float32 [..., vocab] through the tied embedding."""
        return quantized_linear(hidden, self.weights.embed_tokens).astype(mx.float32)


def attention_inputs(
    hidden: mx.array, offsets: int | mx.array, layer: Qwen3LayerWeights, config: Qwen3Config
) -> tuple[mx.array, mx.array, mx.array]:
    """The layer's work before its cache: input norm, then query, key, value (project_qkv)."""
    return project_qkv(mx.fast.rms_norm(hidden, layer.input_norm, config.rms_norm_eps), offsets, layer, config)


def layer_output(hidden: mx.array, attended: mx.array, layer: Qwen3LayerWeights, config: Qwen3Config) -> mx.array:
    """The layer's work after attention: o_proj into the residual, then the MLP into the residual."""
    hidden = hidden + output_projection(attended, layer)
    mlp_in = mx.fast.rms_norm(hidden, layer.post_attention_norm, config.rms_norm_eps)
    return hidden + _swiglu_mlp(mlp_in, layer)


class _CompiledLayerHalves:
    """attention_inputs and layer_output under mx.compile, with a layer's weights as inputs (not
    constants), so one trace serves every layer of the same shape and quantization."""

    def __init__(self, weights: Qwen3Weights) -> None:
        config = weights.config
        self._arrays = [layer.arrays() for layer in weights.layers]
        # One compiled pair per distinct quantization: group sizes and bit widths are traced as constants.
        halves: dict[tuple[tuple[int, int], ...], tuple[Any, Any]] = {}
        self._by_layer: list[tuple[Any, Any]] = []
        for layer in weights.layers:
            key = layer.quantization()
            if key not in halves:
                halves[key] = (
                    mx.compile(lambda hidden, offsets, arrays, like=layer: attention_inputs(
                        hidden, offsets, like.from_arrays(arrays), config
                    )),
                    mx.compile(lambda hidden, attended, arrays, like=layer: layer_output(
                        hidden, attended, like.from_arrays(arrays), config
                    )),
                )
            self._by_layer.append(halves[key])

    def attention_inputs(self, index: int, hidden: mx.array, offsets: mx.array) -> tuple[mx.array, mx.array, mx.array]:
        return self._by_layer[index][0](hidden, offsets, self._arrays[index])

    def layer_output(self, index: int, hidden: mx.array, attended: mx.array) -> mx.array:
        return self._by_layer[index][1](hidden, attended, self._arrays[index])


def _swiglu_mlp(x: mx.array, layer: Qwen3LayerWeights) -> mx.array:
    gate_up = quantized_linear(x, layer.gate_up_proj)
    # One Split node for both halves (two views of gate_up), where two slices would be two nodes.
    gate, up = mx.split(gate_up, [layer.intermediate], axis=-1)
    return quantized_linear(_silu_product(gate, up), layer.down_proj)


# One fused kernel for the three elementwise ops. Shapeless: prefill chunks come in many lengths, and a
# compile per shape would JIT a new kernel for each.
@partial(mx.compile, shapeless=True)
def _silu_product(gate: mx.array, up: mx.array) -> mx.array:
    """silu(gate) * up."""
    return mx.sigmoid(gate) * gate * up
