"""Paged-KV invariants hold after every scheduler step of a serving run, and every pool ends fully free."""

from __future__ import annotations

import pytest

from pagecheck.serving.batch import SchedulerState, batch_generate
from pagecheck.serving.serving_kv import PagedServingKv, ceil_div
from tests.serving_fixtures import BATCH_SIZE, PAGE_SIZE, PREFILL_STEP, serving_model, short_trace


def check_step(state: SchedulerState) -> None:
    kv = state.kv
    assert isinstance(kv, PagedServingKv)
    for layer_idx, pool in enumerate(kv.pools):
        owner: dict[int, int] = {}
        for request in state.requests:
            cache = request.caches[layer_idx]
            where = f"step {state.step_idx}, layer {layer_idx}, request {request.request_id}"
            assert cache.offset == request.context_len, where
            assert cache.num_pages == ceil_div(cache.offset, PAGE_SIZE), where
            for page_id in cache.page_ids:
                assert page_id not in owner, f"{where}: page {page_id} also held by request {owner[page_id]}"
                assert pool.is_live(page_id), f"{where}: page {page_id} is not live in the pool"
                owner[page_id] = request.request_id
        assert sorted(owner) == pool.used_page_ids, f"step {state.step_idx}, layer {layer_idx}: leaked pages"


@pytest.mark.parametrize("path", ["paged", "paged_gather"])
def test_invariants_after_every_step_and_pools_free_at_the_end(path: str) -> None:
    seen: list[PagedServingKv] = []
    steps_with_requests = []

    def on_step(state: SchedulerState) -> None:
        check_step(state)
        seen.append(state.kv)
        steps_with_requests.append(len(state.requests))

    requests = short_trace(num_requests=7)
    batch_generate(
        serving_model(path), requests, batch_size=BATCH_SIZE, prefill_step=PREFILL_STEP, page_size=PAGE_SIZE,
        on_step=on_step,
    )
    assert max(steps_with_requests) == BATCH_SIZE  # the checks saw a full batch
    kv = seen[-1]
    assert kv.open_request_ids == []
    for pool in kv.pools:
        assert pool.num_pages > 0 and pool.num_free_pages == pool.num_pages
    assert sum(pool.reused_page_allocations for pool in kv.pools) > 0  # slots were reused by later requests


def test_dense_variant_caches_hold_exactly_the_written_tokens_and_end_empty() -> None:
    seen = []

    def on_step(state: SchedulerState) -> None:
        seen.append(state.kv)
        for request in state.requests:
            assert all(cache.offset == request.context_len for cache in request.caches)

    batch_generate(
        serving_model("dense"), short_trace(), batch_size=BATCH_SIZE, prefill_step=PREFILL_STEP, on_step=on_step
    )
    assert seen[-1].open_request_ids == [] and seen[-1].usage().storage_bytes == 0
