"""The three serving variants agree, and each attention path accepts only its own kind of cache."""

from __future__ import annotations

import mlx.core as mx
import pytest

from pagecheck.serving.batch import MAX_BATCH_SIZE, Request, batch_generate
from pagecheck.serving.dense_kv_cache import DenseKvCache
from pagecheck.impl.page_pool import TinyKvPagedPool
from pagecheck.impl.paged_kv_cache import TinyKvPagedCache
from pagecheck.serving.qwen3_attention import ATTENTION_PATHS
from tests.serving_fixtures import BATCH_SIZE, PAGE_SIZE, PREFILL_STEP, SERVING_CONFIG, serving_model, short_trace


def run(path: str, num_layers: int = SERVING_CONFIG.num_layers):
    return batch_generate(
        serving_model(path, num_layers), short_trace(), batch_size=BATCH_SIZE, prefill_step=PREFILL_STEP,
        page_size=PAGE_SIZE,
    )


def test_variants_produce_identical_greedy_tokens_in_float32() -> None:
    # On the CPU stream the three paths run the same schedule in the same order, so their
    # logits agree bit for bit. On the GPU the plan follows the table's capacity, which
    # differs between the dense and paged views (split count, tiles), so the sums run in
    # another order: last-bit differences then flip near-tied greedy picks of the
    # random-weight model (seen on the H200; the cause is inferred, not traced).
    with mx.stream(mx.cpu):
        outputs = {path: run(path).outputs for path in ATTENTION_PATHS}
    expected = {request.request_id: request.max_new_tokens for request in short_trace()}
    assert {rid: len(tokens) for rid, tokens in outputs["paged"].items()} == expected
    assert outputs["paged_gather"] == outputs["paged"]
    assert outputs["dense"] == outputs["paged"]


def test_only_the_paged_variant_moves_no_attention_copies() -> None:
    traffic = {path: run(path).steps[-1].traffic for path in ATTENTION_PATHS}
    assert traffic["paged"].total_bytes == 0
    assert traffic["paged_gather"].gather_bytes > 0 and traffic["paged_gather"].repack_bytes == 0
    assert traffic["dense"].repack_bytes > 0 and traffic["dense"].gather_bytes == 0


@pytest.mark.parametrize("num_layers", [1, 3])
def test_block_table_is_built_once_per_phase_whatever_the_layer_count(num_layers: int) -> None:
    result = run("paged", num_layers)
    builds = [step.table_builds for step in result.steps]
    per_step = [after - before for before, after in zip([0, *builds], builds)]
    phases = [(step.prefill_tokens > 0) + (step.decode_batch > 0) for step in result.steps]
    assert per_step == phases


def test_every_layer_of_a_request_shares_one_page_row_object() -> None:
    """The step's table compares rows by identity when the layers' caches hand out the same tuple."""
    rows_by_layer = []

    def record(state) -> None:
        rows_by_layer.append([tuple(id(cache.page_id_tuple) for cache in request.caches) for request in state.requests])

    batch_generate(
        serving_model("paged", 3), short_trace(), batch_size=BATCH_SIZE, prefill_step=PREFILL_STEP,
        page_size=PAGE_SIZE, on_step=record,
    )
    shared = [len(set(ids)) == 1 for step in rows_by_layer for ids in step]
    assert shared and all(shared)


def one_token_chunk(path: str):
    model = serving_model(path)
    return model, mx.array([[1, 2, 3]], dtype=mx.int32)


@pytest.mark.parametrize("path", ["paged", "paged_gather"])
def test_paged_paths_reject_a_dense_cache(path: str) -> None:
    model, tokens = one_token_chunk(path)
    caches = [DenseKvCache(8) for _ in range(SERVING_CONFIG.num_layers)]
    with pytest.raises(TypeError, match="needs a TinyKvPagedCache or BatchingKvCache, got DenseKvCache"):
        model(tokens, 0, caches)


def test_dense_path_rejects_a_paged_cache() -> None:
    model, tokens = one_token_chunk("dense")
    caches = [TinyKvPagedCache(TinyKvPagedPool(PAGE_SIZE)) for _ in range(SERVING_CONFIG.num_layers)]
    with pytest.raises(TypeError, match="needs a DenseKvCache or DenseKvBatch, got TinyKvPagedCache"):
        model(tokens, 0, caches)


@pytest.mark.parametrize("path", ATTENTION_PATHS)
def test_pipelined_decode_gives_the_same_tokens_and_steps_as_reading_each_step_back(path: str) -> None:
    def generate(overlap: bool):
        return batch_generate(
            serving_model(path), short_trace(), batch_size=BATCH_SIZE, prefill_step=PREFILL_STEP,
            page_size=PAGE_SIZE, overlap=overlap,
        )

    with mx.stream(mx.cpu):
        pipelined, stepwise = generate(True), generate(False)
    assert pipelined.outputs == stepwise.outputs
    shape = [(step.prefill_tokens, step.decode_batch, step.admitted) for step in stepwise.steps]
    assert [(step.prefill_tokens, step.decode_batch, step.admitted) for step in pipelined.steps] == shape


def test_pipelined_decode_leaves_at_most_the_newest_token_unread_and_reads_everything_by_the_end() -> None:
    unread_seen: list[int] = []
    requests = short_trace()

    def on_step(state) -> None:
        for request in state.requests:
            unread_seen.append(request.unread)
            assert request.num_outputs == len(request.output) + request.unread

    result = batch_generate(
        serving_model("paged"), requests, batch_size=BATCH_SIZE, prefill_step=PREFILL_STEP, page_size=PAGE_SIZE,
        on_step=on_step,
    )
    assert set(unread_seen) == {0, 1}  # tokens were left on the device between steps, never two
    assert all(request.unread == 0 for request in requests)
    assert {rid: len(tokens) for rid, tokens in result.outputs.items()} == {
        request.request_id: request.max_new_tokens for request in requests
    }


def test_overlap_must_be_a_bool() -> None:
    with pytest.raises(ValueError, match="overlap must be a bool, got 1"):
        batch_generate(serving_model("paged"), short_trace(), overlap=1)


def test_more_decode_slots_than_serving_takes_are_refused_before_any_step() -> None:
    requests = short_trace()
    with pytest.raises(ValueError, match=f"batch_size={MAX_BATCH_SIZE + 1} is above the {MAX_BATCH_SIZE} decode"):
        batch_generate(serving_model("paged"), requests, batch_size=MAX_BATCH_SIZE + 1)
    assert all(request.caches is None and request.prefilled == 0 for request in requests)


def test_a_request_beyond_the_models_context_is_refused_before_any_step() -> None:
    model = serving_model("paged")
    limit = model.config.max_context
    fits = Request([1] * (limit - 1), 2, request_id=0)
    too_long = Request([1] * 3, limit - 1, request_id=1)
    with pytest.raises(ValueError, match=rf"requests \[1\] hold more than .*context of {limit} positions"):
        batch_generate(model, [fits, too_long])
    assert fits.caches is None and fits.prefilled == 0


@pytest.mark.parametrize("overlap", [True, False])
def test_step_times_are_counted_once(overlap: bool) -> None:
    # Each wait for tokens lands in one step's decode time: the steps' prefill and decode seconds add up to
    # no more than the run's wall time.
    result = batch_generate(
        serving_model("paged"), short_trace(), batch_size=BATCH_SIZE, prefill_step=PREFILL_STEP,
        page_size=PAGE_SIZE, overlap=overlap,
    )
    counted = sum(step.prefill_seconds + step.decode_seconds for step in result.steps)
    assert 0 < counted <= result.wall_seconds


def test_a_decode_batch_attends_over_the_whole_storage_without_slicing_it() -> None:
    from pagecheck.serving.serving_kv import PagedServingKv

    kv = PagedServingKv(num_layers=1, max_batch=2, kv_bytes_per_token_layer=2 * 2 * 4 * 4, page_size=PAGE_SIZE)
    caches = kv.open_request(7, 4 * PAGE_SIZE)
    caches[0].append(mx.ones((1, 2, PAGE_SIZE + 1, 4)), mx.ones((1, 2, PAGE_SIZE + 1, 4)))
    kv.admit_to_decode(7, 1)
    kv.table.start_step()
    token = mx.zeros((2, 2, 1, 4))
    metadata = kv.decode_caches[0].update_and_fetch_paged(token, token)
    keys, values = kv.pools[0].storage
    assert metadata.key_pages is keys and metadata.value_pages is values
    assert keys.shape[0] >= kv.pools[0].num_pages  # rows past the issued pages are NaN and never named
    assert metadata.block_table.tolist() == [[-1, -1], caches[0].page_ids]
    assert metadata.context_lens.tolist() == [0, PAGE_SIZE + 2]


def test_waiting_for_the_queued_decode_step_is_decode_time_even_inside_a_prefill_chunk(monkeypatch) -> None:
    # A prefill chunk reads the previous decode step's tokens back once it has submitted its own work, inside
    # its timed span. On a clock that moves only while tokens are read back (one unit per read), every
    # step's prefill time must be exactly zero and the decode times must add up to the reads (all but the
    # last, which batch_generate makes after its last step).
    from pagecheck.serving import batch

    class Clock:
        now = 0.0

        def perf_counter(self) -> float:
            return self.now

    clock = Clock()

    class ReadTakesOneUnit:
        def __init__(self, tokens) -> None:
            self.tokens = tokens

        def tolist(self):
            clock.now += 1.0
            return self.tokens.tolist()

    original = batch._Scheduler.read_back
    reads_inside_prefill = []

    def read_back(self) -> None:
        if self.in_flight is not None:
            self.in_flight = ReadTakesOneUnit(self.in_flight)
            reads_inside_prefill.append(bool(self.prefilling))
        original(self)

    monkeypatch.setattr(batch, "time", clock)
    monkeypatch.setattr(batch._Scheduler, "read_back", read_back)
    result = batch_generate(
        serving_model("paged"), short_trace(), batch_size=BATCH_SIZE, prefill_step=PREFILL_STEP, page_size=PAGE_SIZE,
    )
    assert any(reads_inside_prefill), "the trace never read a decode step back during a prefill chunk"
    assert [step.prefill_seconds for step in result.steps] == [0.0] * len(result.steps)
    assert sum(step.decode_seconds for step in result.steps) == len(reads_inside_prefill) - 1


def test_a_step_table_width_is_the_widest_row_rounded_up_to_the_width_step() -> None:
    from pagecheck.serving.step_page_table import StepPageTable

    table = StepPageTable()
    narrow, _ = table.arrays([(4, 5, 6), (7,)], [10, 2])
    wide, lens = table.arrays([(4, 5, 6), (7,)], [10, 2], width_step=4)
    assert narrow.tolist() == [[4, 5, 6], [7, -1, -1]]
    assert wide.tolist() == [[4, 5, 6, -1], [7, -1, -1, -1]] and lens.tolist() == [10, 2]
    assert table.arrays([(4, 5, 6), (7,)], [10, 2], width_step=4)[0] is wide
    assert table.builds == 2


@pytest.mark.parametrize("overlap", [True, False])
def test_a_decode_step_splits_into_build_submit_and_wait(overlap: bool) -> None:
    from pagecheck.bench.serving_metrics import serving_metrics

    result = batch_generate(
        serving_model("paged"), short_trace(), batch_size=BATCH_SIZE, prefill_step=PREFILL_STEP,
        page_size=PAGE_SIZE, overlap=overlap,
    )
    for step in result.steps:
        parts = step.decode_build_seconds + step.decode_submit_seconds + step.decode_wait_seconds
        assert parts <= step.decode_seconds + 1e-9
        if step.decode_batch:
            assert step.decode_build_seconds > 0
        else:
            assert parts == 0
        if not overlap:
            assert step.decode_submit_seconds == 0  # the read-back evaluates the step
    groups = serving_metrics(result, SERVING_CONFIG.num_layers)["decode_steps_by_company"]
    for group in groups.values():
        if group["steps"]:
            assert group["median_build_ms"] > 0 and group["median_wait_ms"] >= 0
            assert group["median_submit_ms"] >= 0 if overlap else group["median_submit_ms"] == 0
