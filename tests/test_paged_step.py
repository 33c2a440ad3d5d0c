"""The decode step compiled as one call (serving/paged_step.py) against the layer-by-layer build.

Both build the same operations, so the logits must agree bit for bit, and the
caches and pools must end in the same state. A step is all or nothing: a
failure anywhere before the written storage goes back to the pools leaves
every layer as it was.
"""

from __future__ import annotations

import mlx.core as mx
import pytest

import pagecheck.serving.paged_step as paged_step
from pagecheck.serving.qwen3 import Qwen3Model
from pagecheck.serving.serving_kv import PagedServingKv
from pagecheck.serving import step_batching_cache
from pagecheck.serving.step_batching_cache import StepBatchingKvCache
from tests.serving_fixtures import PAGE_SIZE, SERVING_CONFIG, serving_weights

PROMPTS = {0: [3, 1, 4, 1, 5, 9, 2], 2: [9, 2, 6]}  # slot 1 stays empty
BATCH = 3


def prefilled(whole_step: bool, slots: tuple[int, ...] = (0, 2)) -> tuple[Qwen3Model, PagedServingKv, list[int]]:
    weights = serving_weights()
    config = weights.config
    model = Qwen3Model(weights, "paged", whole_step=whole_step)
    kv = PagedServingKv(config.num_layers, BATCH, 2 * config.num_kv_heads * config.head_dim * 4, PAGE_SIZE)
    lengths = [0] * BATCH
    for slot in slots:
        model(mx.array([PROMPTS[slot]], dtype=mx.int32), 0, kv.open_request(slot, 64))
        kv.admit_to_decode(slot, slot)
        lengths[slot] = len(PROMPTS[slot])
    return model, kv, lengths


def decode(model: Qwen3Model, kv: PagedServingKv, lengths: list[int], steps: int) -> list[mx.array]:
    tokens = mx.array([[7], [1], [8]], dtype=mx.int32)
    out = []
    for _ in range(steps):
        kv.table.start_step()
        logits = model.logits(model(tokens, mx.array(lengths, dtype=mx.int32), kv.decode_caches))
        mx.eval(logits)
        out.append(logits)
        tokens = mx.argmax(logits[:, -1], axis=-1).astype(mx.int32)[:, None]
        lengths[:] = [length + 1 if length else 0 for length in lengths]
    return out


def kv_state(kv: PagedServingKv) -> list:
    """Every pool's counts, free ids and storage, every open cache's pages and offset, and the K/V that every
    open cache holds in each layer (its pages' written slots)."""
    pools = [(pool.num_pages, pool.free_page_ids, pool.storage) for pool in kv.pools]
    caches = [
        (cache.page_ids, cache.page_lens, cache.offset) for rid in kv.open_request_ids for cache in kv.caches(rid)
    ]
    held = []
    for layer, pool in enumerate(kv.pools):
        keys, values = pool.storage
        for rid in kv.open_request_ids:
            cache = kv.caches(rid)[layer]
            held += [(keys[page, :, :used], values[page, :, :used]) for page, used in zip(cache.page_ids,
                                                                                          cache.page_lens)]
    return [pools, caches, held]


def assert_same_state(ours: list, theirs: list) -> None:
    """The same pages, counts and held K/V bit for bit. Storage no cache holds may differ: the whole step
    writes an empty decode slot's row to such a position (serving/step_batching_cache.py)."""
    (our_pools, our_caches, our_held), (their_pools, their_caches, their_held) = ours, theirs
    assert our_caches == their_caches
    for (pages, free, _), (their_pages, their_free, _) in zip(our_pools, their_pools):
        assert (pages, free) == (their_pages, their_free)
    assert len(our_held) == len(their_held)
    for mine, theirs_ in zip(our_held, their_held):
        for tensor, their_tensor in zip(mine, theirs_):
            assert mx.array_equal(tensor, their_tensor, equal_nan=True).item()


@pytest.mark.parametrize("spare", [True, False], ids=["spare position", "no spare position"])
@pytest.mark.parametrize("slots", [(0, 2), (0,)])
def test_the_whole_step_equals_the_layer_by_layer_build_bit_for_bit(monkeypatch, slots, spare: bool) -> None:
    # Six steps cross a page boundary (pages of 4) in every row; slot 1 is empty, so the step writes a
    # batch of three rows of which one goes to a spare position, or where none is (forced here) repeats an
    # active row's position and K/V.
    if not spare:
        monkeypatch.setattr(step_batching_cache, "_spare_position", lambda pool, active: None)
    results = []
    for whole_step in (True, False):
        model, kv, lengths = prefilled(whole_step, slots)
        results.append((decode(model, kv, lengths, 6), kv_state(kv)))
    (ours, our_state), (theirs, their_state) = results
    for step, (mine, reference) in enumerate(zip(ours, theirs)):
        assert mx.array_equal(mine, reference).item(), f"decode step {step} differs"
    assert_same_state(our_state, their_state)


def test_the_spare_position_is_past_an_active_tail_else_on_an_unheld_page() -> None:
    from types import SimpleNamespace

    def cache(pages: tuple[int, ...], lens: list[int]) -> SimpleNamespace:
        return SimpleNamespace(page_id_tuple=pages, tail_len=lens[-1])

    def pool(unheld: int | None) -> SimpleNamespace:
        return SimpleNamespace(page_size=4, unheld_page=lambda: unheld)

    spare = step_batching_cache._spare_position
    full, roomy = cache((3, 5), [4, 4]), cache((7,), [2])
    assert spare(pool(9), [(0, full), (2, roomy)]) == (7, 2)  # the slot after slot 2's newest token
    assert spare(pool(9), [(0, full)]) == (9, 0)
    assert spare(pool(None), [(0, full)]) is None


def test_a_partial_batch_writes_its_empty_rows_without_gathering_them() -> None:
    from pagecheck.bench.graph import graph_primitives

    model, kv, lengths = prefilled(True)  # slot 1 empty
    mx.eval([pool.storage for pool in kv.pools])  # the step's graph alone is counted
    kv.table.start_step()
    hidden = model(mx.array([[7], [1], [8]], dtype=mx.int32), mx.array(lengths, dtype=mx.int32), kv.decode_caches)
    assert model.config.num_layers > 1 and "Gather" not in graph_primitives(hidden)
    mx.eval(hidden)


def shapes_of(layer_inputs) -> tuple[int, int]:
    """(block-table width, storage capacity in pages) of a step's first layer: what makes a trace."""
    keys, _, _, _, table, _ = layer_inputs[0]
    return table.shape[1], keys.shape[0]


def traces_and_calls(monkeypatch) -> tuple[list, list]:
    """Record the shapes of every trace of the step's graph and of every step's compiled call."""
    traces, calls = [], []
    original_graph = paged_step.CompiledPagedStep._graph
    monkeypatch.setattr(paged_step.CompiledPagedStep, "_graph",
                        lambda self, tokens, offsets, layer_inputs: traces.append(shapes_of(layer_inputs))
                        or original_graph(self, tokens, offsets, layer_inputs))
    original_call = paged_step.CompiledPagedStep.__init__

    def init(self, *args):
        original_call(self, *args)
        compiled = self._compiled
        self._compiled = lambda tokens, offsets, layer_inputs: calls.append(shapes_of(layer_inputs)) or compiled(
            tokens, offsets, layer_inputs)

    monkeypatch.setattr(paged_step.CompiledPagedStep, "__init__", init)
    return traces, calls


def test_the_step_traces_once_per_table_width_and_storage_size(monkeypatch) -> None:
    traces, calls = traces_and_calls(monkeypatch)
    model, kv, lengths = prefilled(True)
    decode(model, kv, lengths, 6)
    assert len(calls) == 6
    assert traces == list(dict.fromkeys(calls)), "a trace for each new (width, capacity), and no other"
    # The layer-by-layer model never traces the whole step.
    model, kv, lengths = prefilled(False)
    decode(model, kv, lengths, 2)
    assert len(calls) == 6


def test_the_table_width_is_a_multiple_of_the_width_step(monkeypatch) -> None:
    monkeypatch.setattr(paged_step, "WIDTH_STEP_TOKENS", 2 * PAGE_SIZE)
    _, calls = traces_and_calls(monkeypatch)
    model, kv, lengths = prefilled(True)
    decode(model, kv, lengths, 6)  # slot 0 holds 8..13 tokens with each step's token: 2, 3, 3, 3, 4, 4 pages
    assert [width for width, _ in calls] == [2, 4, 4, 4, 4, 4]
    monkeypatch.setattr(paged_step, "WIDTH_STEP_TOKENS", 512)
    _, calls = traces_and_calls(monkeypatch)
    model, kv, lengths = prefilled(True)
    decode(model, kv, lengths, 2)
    assert [width for width, _ in calls] == [128, 128]


@pytest.mark.parametrize("where", ["claim", "check"])
def test_a_step_that_fails_leaves_every_layer_as_it_was(monkeypatch, where) -> None:
    model, kv, lengths = prefilled(True)
    decode(model, kv, lengths, 1)
    before = kv_state(kv)
    offsets_before = [cache.offset for cache in kv.caches(0)]

    def fail(*args, **kwargs):
        raise ValueError("injected failure")

    if where == "claim":
        # The last layer's claim fails after every other layer has claimed.
        last = kv.decode_caches[-1]
        monkeypatch.setattr(last, "claim_tokens", fail)
    else:
        monkeypatch.setattr(paged_step, "check_paged_inputs", fail)
    kv.table.start_step()
    with pytest.raises(ValueError, match="injected failure"):
        model(mx.array([[1], [1], [1]], dtype=mx.int32), mx.array(lengths, dtype=mx.int32), kv.decode_caches)
    assert [cache.offset for cache in kv.caches(0)] == offsets_before
    assert_same_state(kv_state(kv), before)
    for pool, (_, _, storage) in zip(kv.pools, before[0]):
        assert pool.storage[0] is storage[0] and pool.storage[1] is storage[1]
    monkeypatch.undo()
    # The next step runs as if the failed one had never been tried.
    ours = decode(model, kv, lengths, 2)
    reference_model, reference_kv, reference_lengths = prefilled(False)
    theirs = decode(reference_model, reference_kv, reference_lengths, 3)[1:]
    for mine, reference in zip(ours, theirs):
        assert mx.array_equal(mine[mx.array([0, 2])], reference[mx.array([0, 2])]).item()


def test_a_claim_checks_the_shape_and_gives_nothing_without_storage() -> None:
    model, kv, _ = prefilled(True)
    batch = kv.decode_caches[0]
    config = SERVING_CONFIG
    with pytest.raises(ValueError, match=r"must be \[B, H_kv, 1, D\]"):
        batch.claim_tokens((BATCH, config.num_kv_heads, 2, config.head_dim), mx.float32)
    with pytest.raises(ValueError, match="max_active_requests=3"):
        batch.claim_tokens((2, config.num_kv_heads, 1, config.head_dim), mx.float32)
    offsets = [cache.offset for cache in kv.caches(0)]
    empty = PagedServingKv(1, 1, 4, PAGE_SIZE)
    empty.open_request(0, 8)
    empty.admit_to_decode(0, 0)
    with pytest.raises(ValueError, match="no page storage yet"):
        empty.decode_caches[0].claim_tokens((1, config.num_kv_heads, 1, config.head_dim), mx.float32)
    assert empty.caches(0)[0].offset == 0 and empty.pools[0].num_pages == 0
    assert [cache.offset for cache in kv.caches(0)] == offsets
    assert isinstance(batch, StepBatchingKvCache)


def prefill_logits(whole_step: bool, chunk: int, prompt_len: int = 21) -> tuple[list[mx.array], PagedServingKv]:
    """A second request prefilled in chunks of `chunk` after a first one gave the pools their storage."""
    weights = serving_weights()
    config = weights.config
    model = Qwen3Model(weights, "paged", whole_step=whole_step)
    kv = PagedServingKv(config.num_layers, BATCH, 2 * config.num_kv_heads * config.head_dim * 4, PAGE_SIZE)
    model(mx.array([PROMPTS[0]], dtype=mx.int32), 0, kv.open_request(0, 64))
    caches = kv.open_request(1, 64)
    prompt = [(7 * i + 3) % config.vocab_size for i in range(prompt_len)]
    out = []
    for start in range(0, prompt_len, chunk):
        kv.table.start_step()
        hidden = model(mx.array([prompt[start : start + chunk]], dtype=mx.int32), start, caches)
        out.append(model.logits(hidden))
        mx.eval(out[-1])
    return out, kv


def test_full_prefill_chunks_run_as_one_compiled_call_equal_to_the_layer_by_layer_build(monkeypatch) -> None:
    monkeypatch.setattr(paged_step, "CHUNK_MULTIPLE", 4)
    traces, calls = traces_and_calls(monkeypatch)
    ours, our_kv = prefill_logits(True, 8)
    # Chunks of 8, 8 and 5 tokens: the two full ones compile (one trace each: the storage grew), the last
    # runs layer by layer.
    assert len(calls) == 2 and len(traces) == len(set(calls))
    theirs, their_kv = prefill_logits(False, 8)
    for index, (mine, reference) in enumerate(zip(ours, theirs)):
        assert mx.array_equal(mine, reference).item(), f"prefill chunk {index} differs"
    assert_same_state(kv_state(our_kv), kv_state(their_kv))


def test_a_prefill_chunk_that_fails_leaves_every_layer_as_it_was(monkeypatch) -> None:
    monkeypatch.setattr(paged_step, "CHUNK_MULTIPLE", 4)
    _, kv = prefill_logits(True, 8, prompt_len=8)
    before = kv_state(kv)
    model = Qwen3Model(serving_weights(), "paged")
    last = kv.caches(1)[-1]

    def fail(*args, **kwargs):
        raise ValueError("injected failure")

    monkeypatch.setattr(last, "claim_tokens", fail)
    with pytest.raises(ValueError, match="injected failure"):
        model(mx.array([[1] * 8], dtype=mx.int32), 8, kv.caches(1))
    assert_same_state(kv_state(kv), before)


def test_a_served_trace_gives_the_same_tokens_with_compiled_chunks(monkeypatch) -> None:
    from pagecheck.serving.batch import batch_generate
    from tests.serving_fixtures import PREFILL_STEP, short_trace

    monkeypatch.setattr(paged_step, "CHUNK_MULTIPLE", PREFILL_STEP)
    traces, calls = traces_and_calls(monkeypatch)
    outputs = []
    for whole_step in (True, False):
        model = Qwen3Model(serving_weights(), "paged", whole_step=whole_step)
        result = batch_generate(model, short_trace(), batch_size=BATCH, prefill_step=PREFILL_STEP, page_size=PAGE_SIZE)
        outputs.append(result.outputs)
    assert outputs[0] == outputs[1]
    assert calls, "the compiled step ran"
