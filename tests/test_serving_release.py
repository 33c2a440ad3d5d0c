"""A request's pages are released in every layer exactly once, also when an error interrupts the run."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from pagecheck.serving.batch import SchedulerState, batch_generate
from pagecheck.impl.page_pool import TinyKvPagedPool
from pagecheck.serving.qwen3 import Qwen3Model
from pagecheck.serving.request import Request
from tests.serving_fixtures import BATCH_SIZE, PAGE_SIZE, PREFILL_STEP, serving_model, short_trace


class InjectedError(RuntimeError):
    pass


class FailingModel:
    """Delegates to a real model and raises on its `fail_at`-th forward call."""

    def __init__(self, model: Qwen3Model, fail_at: int) -> None:
        self._model = model
        self.fail_at = fail_at
        self.calls = 0
        self.config, self.dtype, self.attention_path = model.config, model.dtype, model.attention_path

    def __call__(self, *args: Any) -> Any:
        self.calls += 1
        if self.calls == self.fail_at:
            raise InjectedError(f"injected at forward call {self.calls}")
        return self._model(*args)

    def logits(self, hidden: Any) -> Any:
        return self._model.logits(hidden)


@pytest.fixture
def page_events(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Counts every allocation and free, per (pool, page id), across the whole run; keeps the pools."""
    events: dict[str, Any] = {"allocated": Counter(), "freed": Counter(), "pools": {}}
    allocate, free = TinyKvPagedPool.allocate_page, TinyKvPagedPool.free_page

    def counting_allocate(pool: TinyKvPagedPool) -> int:
        page_id = allocate(pool)
        events["allocated"][(id(pool), page_id)] += 1
        events["pools"][id(pool)] = pool
        return page_id

    def counting_free(pool: TinyKvPagedPool, page_id: int) -> None:
        free(pool, page_id)
        events["freed"][(id(pool), page_id)] += 1

    monkeypatch.setattr(TinyKvPagedPool, "allocate_page", counting_allocate)
    monkeypatch.setattr(TinyKvPagedPool, "free_page", counting_free)
    return events


def run_until_failure(path: str, fail_at: int) -> tuple[list[SchedulerState], list[Request]]:
    states: list[SchedulerState] = []
    requests = short_trace(num_requests=7)
    with pytest.raises(InjectedError):
        batch_generate(
            FailingModel(serving_model(path), fail_at), requests, batch_size=BATCH_SIZE, prefill_step=PREFILL_STEP,
            page_size=PAGE_SIZE, on_step=states.append,
        )
    return states, requests


# Call 2 is the first request's second prefill chunk, inside the first step; by call 12 requests
# are decoding while others prefill.
@pytest.mark.parametrize("fail_at", [2, 12])
@pytest.mark.parametrize("path", ["paged", "paged_gather"])
def test_error_mid_run_releases_every_page_once(path: str, fail_at: int, page_events: dict[str, Any]) -> None:
    states, requests = run_until_failure(path, fail_at)
    if fail_at == 12:
        assert any(len(state.requests) == BATCH_SIZE for state in states)  # the error hit a full batch
    assert page_events["allocated"], "the run wrote no pages before the error"
    assert page_events["freed"] == page_events["allocated"]
    assert all(pool.num_free_pages == pool.num_pages for pool in page_events["pools"].values())
    assert all(request.caches is None and request.slot is None for request in requests)


def test_completed_run_frees_each_allocation_exactly_once(page_events: dict[str, Any]) -> None:
    batch_generate(
        serving_model("paged"), short_trace(), batch_size=BATCH_SIZE, prefill_step=PREFILL_STEP, page_size=PAGE_SIZE
    )
    assert page_events["allocated"] and page_events["freed"] == page_events["allocated"]


def test_dense_error_mid_run_drops_every_buffer() -> None:
    states, _ = run_until_failure("dense", 12)
    kv = states[-1].kv
    assert kv.open_request_ids == [] and kv.usage().storage_bytes == 0
