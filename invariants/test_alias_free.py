"""alias_free: requests sharing a pool never share a page, and never see each other's writes.

A state machine opens requests on one pool, appends chunks to them in any
order and releases them, so freed pages are reused by later appends. After
every step the live page sets must be disjoint (and none of them free), and
every live request's attention output must still equal the oracle over its
own tokens.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule, run_state_machine_as_test

from pagecheck.invariants.calls import append_for_a_check, attention_over_metadata, current_metadata, metadata_layout
from pagecheck.invariants.course import DAY_3, Geometry, attends_alone, split_at_the_course
from pagecheck.invariants.strategies import seeds
from pagecheck.invariants.verdict import expect, expect_close, expect_gathered_tokens, expect_pages_hold
from pagecheck.invariants.workload import WrittenKv

INVARIANT = "alias_free"
pytestmark = pytest.mark.invariant(INVARIANT)

HEAD_DIM = 32
NUM_KV_HEADS = 2
NUM_Q_HEADS = 4
MAX_REQUESTS = 4


class SharedPool:
    """Requests on one pool, each with the record of what it wrote and a fixed decode query."""

    def __init__(
        self, pool_type: type, cache_type: type, paged_attention: object, page_size: int, seed: int,
        head_dim: int = HEAD_DIM, course: bool = False,
    ) -> None:
        self.cache_type = cache_type
        self.head_dim = head_dim
        # A course case calls as the course does: attention over the metadata an append returned, with its own mask
        # (the append's last token with mask "causal"), live pages apart from one another (the course reads
        # free_page_ids only as a snapshot).
        self.course = course
        self.mask = "causal" if course else None
        self.paged_attention = paged_attention
        self.pool = pool_type(page_size)
        self.page_size = page_size
        self.rng = np.random.default_rng(seed)
        self.requests: dict[int, tuple[object, WrittenKv, np.ndarray]] = {}
        self.latest: dict[int, Any] = {}  # each request's metadata from its last append
        self.opened = 0

    def open(self) -> int:
        record = WrittenKv(NUM_KV_HEADS, self.head_dim, "float32")
        self.requests[self.opened] = (self.cache_type(self.pool), record, record.make_query(self.rng, NUM_Q_HEADS, 1))
        self.opened += 1
        return self.opened - 1

    def append(self, request: int, length: int) -> None:
        cache, record, _ = self.requests[request]
        # A course case's last token with mask "causal", whose metadata's own mask the decode gets.
        self.latest[request] = append_for_a_check(cache, *record.make_chunk(self.rng, length), self.course)
        if self.course:
            # Attended right away, as the course attends over a metadata before anything else is appended to its
            # pool: a metadata may hold only until the pool's next append (a staging buffer reused per append).
            self.check_output(request, f"after appending {length} to request {request}")

    def release(self, request: int) -> None:
        cache, _, _ = self.requests.pop(request)
        self.latest.pop(request, None)
        cache.release()

    def live_pages(self) -> dict[int, list[int]]:
        return {r: [int(p) for p in cache.page_ids] for r, (cache, _, _) in self.requests.items()}

    def check_disjoint(self, step: str) -> None:
        owner: dict[int, int] = {}
        free = set() if self.course else {int(p) for p in self.pool.free_page_ids}
        for request, pages in self.live_pages().items():
            for page in pages:
                expect(
                    page not in owner, INVARIANT,
                    f"{step}: page {page} is held twice (requests {owner.get(page)} and {request}); "
                    f"live pages {self.live_pages()}",
                )
                expect(
                    page not in free, INVARIANT,
                    f"{step}: page {page} of live request {request} is also free; free list {sorted(free)}",
                )
                owner[page] = request

    def check_outputs(self, step: str) -> None:
        """Every live request's decode output over its pages, read now. A course case checks each request's output
        right after its append, over the metadata that append returned; here it reads each request's tokens through
        gather_dense(), as the course's reuse test reads them, so a write of another request into its pages shows."""
        for request, (cache, record, _) in self.requests.items():
            if not self.course:
                self.check_output(request, step)
            elif record.length:
                expect_gathered_tokens(INVARIANT, f"{step}: request {request}", cache, record)

    def check_output(self, request: int, step: str) -> None:
        cache, record, query = self.requests[request]
        if record.length == 0:
            return
        metadata = self.latest[request] if self.course else current_metadata(self.pool, cache, self.page_size)
        layout = metadata_layout(query, metadata, "float32", self.mask, self.page_size)
        expect_pages_hold(INVARIANT, f"{step}: request {request}'s metadata", layout, {0: record})
        if not attends_alone(self.course, query.shape[2], record.length):
            return  # a course case's float32 decode of one request: the course decodes float32 only in a batch
        expect_close(
            INVARIANT, f"{step}: request {request}'s decode output vs the tokens it wrote",
            attention_over_metadata(self.paged_attention, query, metadata, self.mask, own_mask=self.course),
            record.attention(query, self.mask), layout,
        )


class SharedPoolMachine(RuleBasedStateMachine):
    def __init__(self, pool_type: type, cache_type: type, paged_attention: object) -> None:
        super().__init__()
        self.types = (pool_type, cache_type, paged_attention)
        self.shared: SharedPool | None = None
        self.history: list[str] = []

    @initialize(page_size=st.sampled_from((1, 2, 3, 4)), seed=seeds())
    def start(self, page_size: int, seed: int) -> None:
        self.shared = SharedPool(*self.types, page_size=page_size, seed=seed)
        self.history.append(f"pool(page_size={page_size})")

    @precondition(lambda self: len(self.shared.requests) < MAX_REQUESTS)
    @rule()
    def open_request(self) -> None:
        self.history.append(f"open {self.shared.open()}")

    @precondition(lambda self: self.shared.requests)
    @rule(pick=st.integers(0, MAX_REQUESTS - 1), length=st.integers(1, 6))
    def append(self, pick: int, length: int) -> None:
        request = sorted(self.shared.requests)[pick % len(self.shared.requests)]
        self.shared.append(request, length)
        self.history.append(f"append {length} to {request}")
        self.shared.check_outputs(self.step())

    @precondition(lambda self: self.shared.requests)
    @rule(pick=st.integers(0, MAX_REQUESTS - 1))
    def release(self, pick: int) -> None:
        request = sorted(self.shared.requests)[pick % len(self.shared.requests)]
        self.shared.release(request)
        self.history.append(f"release {request}")

    @invariant()
    def live_pages_are_disjoint(self) -> None:
        if self.shared is not None:
            self.shared.check_disjoint(self.step())

    def step(self) -> str:
        return "after " + ", ".join(self.history[-6:])


@pytest.mark.beyond_course
def test_live_requests_never_share_pages(pool_type: type, cache_type: type, paged_attention: object) -> None:
    run_state_machine_as_test(lambda: SharedPoolMachine(pool_type, cache_type, paged_attention))


@split_at_the_course(f"{DAY_3}::test_task_1_paged_pool_reuses_freed_pages",
                     Geometry(page_sizes=(1, 4), kv_heads=(NUM_KV_HEADS,), head_dim=HEAD_DIM), per_page_size=True)
def test_pages_freed_by_one_request_are_not_shared_by_the_next(
    pool_type: type, cache_type: type, paged_attention: object, geometry: Geometry, page_size: int,
    rng: np.random.Generator,
) -> None:
    shared = SharedPool(pool_type, cache_type, paged_attention, page_size, int(rng.integers(2**32)),
                        geometry.head_dim, geometry.course)
    first, second = shared.open(), shared.open()
    shared.append(first, 3 * page_size)
    shared.append(second, page_size)
    shared.release(first)
    third = shared.open()
    # Both growing requests now draw from the pages `first` gave back.
    for _ in range(2):
        shared.append(second, page_size)
        shared.append(third, page_size)
        shared.check_disjoint(f"requests {second} and {third} growing after request {first} was released")
    shared.check_outputs(f"requests {second} and {third} growing after request {first} was released")
