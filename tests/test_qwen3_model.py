"""The cached, chunked forward of the Qwen3 model equals a cache-free forward of the whole sequence.

The oracle here recomputes every position at once from the dequantized
weights, with the course's dense grouped attention (impl/dense_attention.py)
and offset-0 rotary embeddings: any error in cache appends, rotary offsets,
causal masking or the quantized embedding shows up as a logit difference.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from pagecheck.impl.dense_attention import scaled_dot_product_attention_grouped
from pagecheck.serving.dense_kv_batch import DenseKvBatch
from pagecheck.serving.dense_kv_cache import DenseKvCache
from pagecheck.impl.page_pool import TinyKvPagedPool
from pagecheck.impl.paged_kv_cache import TinyKvPagedCache
from pagecheck.serving.qwen3_attention import ATTENTION_PATHS
from pagecheck.serving.qwen3_weights import Qwen3Weights
from pagecheck.reference.tolerance import compare
from tests.serving_fixtures import PAGE_SIZE, SERVING_CONFIG, serving_model, serving_weights

CHUNKS = (5, 7, 1, 1, 1)  # prefill chunks across page boundaries, then three decode steps


def dequantized_linear(x: mx.array, matrix) -> mx.array:
    """x @ matrix.T from the dequantized weights: the oracle's matmul, never mx.quantized_matmul."""
    return x @ matrix.dequantize().T


def cache_free_logits(weights: Qwen3Weights, tokens: mx.array) -> mx.array:
    config = weights.config
    length = tokens.shape[1]
    eps = config.rms_norm_eps
    linear = dequantized_linear

    def heads(x: mx.array, count: int) -> mx.array:
        return x.reshape(1, length, count, config.head_dim).transpose(0, 2, 1, 3)

    def rope(x: mx.array) -> mx.array:
        return mx.fast.rope(x, config.head_dim, traditional=False, base=config.rope_theta, scale=1.0, offset=0)

    hidden = mx.take(weights.embed_tokens.dequantize(), tokens, axis=0)
    for layer in weights.layers:
        x = mx.fast.rms_norm(hidden, layer.input_norm, eps)
        query = rope(mx.fast.rms_norm(heads(linear(x, layer.q_proj), config.num_q_heads), layer.q_norm, eps))
        key = rope(mx.fast.rms_norm(heads(linear(x, layer.k_proj), config.num_kv_heads), layer.k_norm, eps))
        value = heads(linear(x, layer.v_proj), config.num_kv_heads)
        attended = scaled_dot_product_attention_grouped(query, key, value, mask="causal")
        hidden = hidden + linear(attended.transpose(0, 2, 1, 3).reshape(1, length, -1), layer.o_proj)
        x = mx.fast.rms_norm(hidden, layer.post_attention_norm, eps)
        gate = linear(x, layer.gate_proj)
        hidden = hidden + linear(gate * mx.sigmoid(gate) * linear(x, layer.up_proj), layer.down_proj)
    hidden = mx.fast.rms_norm(hidden, weights.final_norm, eps)
    return linear(hidden, weights.embed_tokens)


def new_caches(path: str) -> list:
    if path == "dense":
        return [DenseKvCache(sum(CHUNKS)) for _ in range(SERVING_CONFIG.num_layers)]
    return [TinyKvPagedCache(TinyKvPagedPool(PAGE_SIZE)) for _ in range(SERVING_CONFIG.num_layers)]


def random_tokens(seed: int) -> mx.array:
    rng = np.random.default_rng(seed)
    return mx.array(rng.integers(0, SERVING_CONFIG.vocab_size, (1, sum(CHUNKS))), dtype=mx.int32)


def chunked_logits(path: str, tokens: mx.array) -> mx.array:
    model, caches = serving_model(path), new_caches(path)
    pieces, start = [], 0
    for length in CHUNKS:
        pieces.append(model.logits(model(tokens[:, start : start + length], start, caches)))
        start += length
    return mx.concatenate(pieces, axis=1)


@pytest.mark.parametrize("path", ATTENTION_PATHS)
def test_chunked_cached_forward_matches_cache_free_forward(path: str) -> None:
    tokens = random_tokens(11)
    result = compare(chunked_logits(path, tokens), cache_free_logits(serving_weights(), tokens), "float32")
    assert result.passed, result.summary()


@pytest.mark.parametrize("path", ATTENTION_PATHS)
def test_chunked_cached_forward_matches_with_dequantized_linears(path: str, monkeypatch) -> None:
    # The same forward with every linear computed as x @ dequantize(w).T, the oracle's own matmul.
    # Passing where the test above fails puts the fault in mx.quantized_matmul on that device, as on
    # the H200 before impl.quantized_linear routed single-group rows around it (ext/kernels/NOTES.md); failing
    # too puts it in the cached forward.
    monkeypatch.setattr("pagecheck.serving.qwen3.quantized_linear", dequantized_linear)
    monkeypatch.setattr("pagecheck.serving.qwen3_attention.quantized_linear", dequantized_linear)
    tokens = random_tokens(12)
    result = compare(chunked_logits(path, tokens), cache_free_logits(serving_weights(), tokens), "float32")
    assert result.passed, result.summary()


def test_batched_rows_at_different_offsets_match_their_own_runs() -> None:
    """Rotary offsets per row: two requests decoded in one batch equal each decoded alone."""
    model = serving_model("dense")
    prompts = [[3, 1, 4, 1, 5], [9, 2, 6]]
    alone = []
    for prompt in prompts:
        caches = [DenseKvCache(8) for _ in range(SERVING_CONFIG.num_layers)]
        model(mx.array([prompt[:-1]], dtype=mx.int32), 0, caches)
        alone.append(model.logits(model(mx.array([prompt[-1:]], dtype=mx.int32), len(prompt) - 1, caches)))
    batches = [DenseKvBatch(2) for _ in range(SERVING_CONFIG.num_layers)]
    for slot, prompt in enumerate(prompts):
        caches = [DenseKvCache(8) for _ in range(SERVING_CONFIG.num_layers)]
        model(mx.array([prompt[:-1]], dtype=mx.int32), 0, caches)
        for batch, cache in zip(batches, caches):
            batch.add_request(cache, slot)
    offsets = mx.array([len(p) - 1 for p in prompts], dtype=mx.int32)
    batched = model.logits(model(mx.array([p[-1:] for p in prompts], dtype=mx.int32), offsets, batches))
    result = compare(batched, mx.concatenate(alone, axis=0), "float32")
    assert result.passed, result.summary()


def test_cache_count_must_match_the_layers() -> None:
    with pytest.raises(ValueError, match="caches has 1 entries; the model has 2 layers"):
        serving_model("paged")(mx.array([[1]], dtype=mx.int32), 0, new_caches("paged")[:1])


def test_stacked_projections_are_views_of_the_rows_drawn_one_by_one() -> None:
    from pagecheck.serving.quantized import stack_rows

    config = SERVING_CONFIG
    layer = serving_weights().layers[0]
    assert layer.gate_proj.shape == layer.up_proj.shape == (config.intermediate_size, config.hidden_size)
    restacked = stack_rows([layer.gate_proj, layer.up_proj])
    for name in ("weight", "scales", "biases"):
        assert mx.array_equal(getattr(restacked, name), getattr(layer.gate_up_proj, name)).item()
    with pytest.raises(ValueError, match="one column count"):
        stack_rows([layer.q_proj, layer.down_proj])


@pytest.mark.parametrize("length", [1, 3])
def test_heads_merge_like_the_transposed_layout(length: int) -> None:
    from pagecheck.serving.qwen3_attention import _merge_heads
    from pagecheck.bench.graph import graph_primitives

    heads = mx.random.normal((2, 3, length, 4), key=mx.random.key(length))
    mx.eval(heads)
    merged = _merge_heads(heads)
    if length == 1:  # a decode step: one reshape (counted before evaluation), no transpose
        assert graph_primitives(merged) == {"Reshape": 1}
    assert mx.array_equal(merged, heads.transpose(0, 2, 1, 3).reshape(2, length, 12)).item()


def test_the_mlp_takes_gate_and_up_in_one_split_node() -> None:
    from pagecheck.bench.graph import graph_primitives
    from pagecheck.serving.quantized import quantized_linear
    from pagecheck.serving.qwen3 import _silu_product, _swiglu_mlp

    layer = serving_weights().layers[0]
    x = mx.random.normal((2, 1, SERVING_CONFIG.hidden_size), key=mx.random.key(7)).astype(serving_weights().dtype)
    mx.eval(x)
    out = _swiglu_mlp(x, layer)
    counts = graph_primitives(out)
    assert counts["Split"] == 1 and "Slice" not in counts, counts
    gate_up = quantized_linear(x, layer.gate_up_proj)
    gate, up = gate_up[..., : layer.intermediate], gate_up[..., layer.intermediate :]
    sliced = quantized_linear(_silu_product(gate, up), layer.down_proj)
    assert mx.array_equal(out, sliced).item()


def test_int_offsets_reach_qk_norm_rope_as_data_not_graph_nodes() -> None:
    from pagecheck.bench.graph import graph_primitives
    from pagecheck.serving.qwen3_attention import project_qkv

    weights = serving_weights()
    x = mx.random.normal((2, 3, SERVING_CONFIG.hidden_size), key=mx.random.key(9)).astype(weights.dtype)
    mx.eval(x, weights.layers[0].arrays())
    q, k, v = project_qkv(x, 5, weights.layers[0], SERVING_CONFIG)
    offsets = mx.array([5, 5], dtype=mx.int32)
    as_array = project_qkv(x, offsets, weights.layers[0], SERVING_CONFIG)
    # A prefill chunk's int offset adds no nodes to what evaluated offsets take (mx.full would add a
    # Broadcast and a Full every layer).
    assert graph_primitives(q) == graph_primitives(as_array[0])
    assert all(mx.array_equal(a, b).item() for a, b in zip((q, k, v), as_array))


def batched_decode_logits(path: str, compile_decode: bool, steps: int = 3) -> list[mx.array]:
    """Two requests prefilled eagerly, then `steps` batched decode steps; the logits of each step."""
    from pagecheck.impl.kv_cache import BatchingKvCache
    from pagecheck.serving.qwen3 import Qwen3Model

    model = Qwen3Model(serving_weights(), path, compile_decode=compile_decode)
    prompts = [[3, 1, 4, 1, 5, 9, 2], [9, 2, 6]]
    layers = SERVING_CONFIG.num_layers
    if path == "dense":
        batches = [DenseKvBatch(2) for _ in range(layers)]
        new_cache = lambda layer: DenseKvCache(16)  # noqa: E731
    else:
        batches = [BatchingKvCache(2) for _ in range(layers)]
        pools = [TinyKvPagedPool(PAGE_SIZE) for _ in range(layers)]
        new_cache = lambda layer: TinyKvPagedCache(pools[layer])  # noqa: E731
    for slot, prompt in enumerate(prompts):
        caches = [new_cache(layer) for layer in range(layers)]
        model(mx.array([prompt], dtype=mx.int32), 0, caches)
        for batch, cache in zip(batches, caches):
            batch.add_request(cache, slot)
    tokens = mx.array([[7], [8]], dtype=mx.int32)
    lengths = [len(prompt) for prompt in prompts]
    out = []
    for step in range(steps):
        logits = model.logits(model(tokens, mx.array(lengths, dtype=mx.int32), batches))
        mx.eval(logits)
        out.append(logits)
        tokens = mx.argmax(logits[:, -1], axis=-1).astype(mx.int32)[:, None]
        lengths = [length + 1 for length in lengths]
    return out


@pytest.mark.parametrize("path", ATTENTION_PATHS)
def test_compiled_decode_steps_equal_eager_ones_bit_for_bit(path: str) -> None:
    # Crosses a page boundary (PAGE_SIZE 4) in both rows; the compiled halves run the same operations.
    compiled, eager = batched_decode_logits(path, True), batched_decode_logits(path, False)
    for step, (ours, theirs) in enumerate(zip(compiled, eager)):
        assert mx.array_equal(ours, theirs).item(), f"decode step {step} differs compiled vs eager"


def test_compiled_decode_is_one_trace_per_half_for_every_layer(monkeypatch) -> None:
    # Every layer shares one quantization, so the model keeps one compiled pair; counting the traces
    # (calls of the traced function) holds the pair to one trace each over several steps and layers.
    import pagecheck.serving.qwen3 as qwen3

    calls = {"attention_inputs": 0, "layer_output": 0}
    for name in calls:
        original = getattr(qwen3, name)

        def counted(*args, _original=original, _name=name):
            calls[_name] += 1
            return _original(*args)

        monkeypatch.setattr(qwen3, name, counted)
    batched_decode_logits("paged", True, steps=4)
    # The two eager prefills call each half once per layer; the compiled decode steps trace each half once.
    assert calls == {"attention_inputs": 2 * SERVING_CONFIG.num_layers + 1, "layer_output": 2 * SERVING_CONFIG.num_layers + 1}


def test_compile_decode_must_be_a_bool() -> None:
    from pagecheck.serving.qwen3 import Qwen3Model

    with pytest.raises(ValueError, match="compile_decode must be a bool, got 1"):
        Qwen3Model(serving_weights(), "paged", compile_decode=1)
    with pytest.raises(ValueError, match="whole_step must be a bool, got 'yes'"):
        Qwen3Model(serving_weights(), "paged", whole_step="yes")
