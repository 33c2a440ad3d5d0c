"""batching_cache: BatchingKvCache turns its active requests into one batch of paged metadata.

Requests join and leave slots between decode steps. At every step the block
table has one row per slot, as wide as the widest request: a live row lists
that request's pages in order then -1, an empty slot is all -1 with context 0,
and the context of a live row is what that request has written. Attention
over the metadata gives each live row its own request's output and empty
rows zeros. Multi-token prefill chunks through the batch count every token
of the chunk in each live row's context. Requests on two pools join a batch,
whose append refuses them before any row changes.
"""

from __future__ import annotations

import numpy as np
import pytest

from pagecheck.invariants.calls import (
    attention_as_the_course_calls, attention_over_metadata, cache_state, course_paged_append, course_tolist,
    equals_list, metadata_layout, pool_state, read_once, same_pool_state, the_courses_batch_step,
)
from pagecheck.invariants.course import COURSE_HEAD_DIM, COURSE_MAX_BATCH, COURSE_PHRASES, DAY_3, DAY_4
from pagecheck.invariants.verdict import (
    expect, expect_arrays, expect_close, expect_close_to_its_gather, expect_course_phrase, expect_pages_hold,
    expect_value_error, gathered,
)
from pagecheck.invariants.workload import WrittenKv
from pagecheck.reference.arrays import to_numpy

INVARIANT = "batching_cache"
pytestmark = pytest.mark.invariant(INVARIANT)

SLOTS = 4
MAX_SEQ_LEN = 64
HEAD_DIM = 32
NUM_KV_HEADS = 2
NUM_Q_HEADS = 4

# Decode steps, and what happens to the slots before each: (step, "add" or "remove", slot, prefill).
SCHEDULE = [(0, "add", 0, 9), (0, "add", 2, 3), (2, "add", 3, 1), (3, "remove", 0, 0), (4, "add", 0, 5)]
# The course's own batch: every request added before its one decode step (no course test adds one later or calls
# remove_request), each decode token landing in its request's tail page (the course's go 3 -> 4 and 6 -> 7), its
# requests of 2 pages at most (the course's hold 1 and 2: a batch may keep a row's room at 2 pages,
# batch_rows_of_at_most_2_pages), in COURSE_MAX_BATCH slots with the empty one between the two live ones.
COURSE_SCHEDULE = [(0, "add", 0, 7), (0, "add", 2, 3)]
STEPS = 7
COURSE_STEPS = 1


def _check_step(
    batching: object, metadata: object, live: dict[int, tuple[object, WrittenKv]], step: str, exact_width: bool = True,
    course: bool = False, slots: int = SLOTS,
) -> None:
    """The batch's metadata over its `slots`: each live row its request's pages then -1 padding, each empty row all
    -1, each context its request's. In a `course` case a live row's padding is free: the course pins only an empty
    row's."""
    table = to_numpy(metadata.block_table)
    lens = to_numpy(metadata.context_lens).tolist()
    widest = max(cache.num_pages for cache, _ in live.values())
    # The course checks one batch whose table is exactly as wide as its widest request; it fixes no wider -1 padding.
    width = widest if exact_width else max(widest, table.shape[1] if table.ndim == 2 else 0)
    expect(table.shape == (slots, width), INVARIANT, f"{step}: block_table shape {table.shape}, expected {(slots, width)}")
    for slot in range(slots):
        row = [int(p) for p in table[slot]]
        if slot in live:
            cache, record = live[slot]
            pages = [int(p) for p in cache.page_ids]
            want_row, want_len = pages + [-1] * (width - len(pages)), record.length
        else:
            want_row, want_len = [-1] * width, 0
        if course and slot in live:
            row, want_row = row[: len(pages)], pages
        expect(row == want_row, INVARIANT, f"{step}: slot {slot} table row {row}, expected {want_row}")
        expect(lens[slot] == want_len, INVARIANT, f"{step}: slot {slot} context {lens[slot]}, expected {want_len}")


@pytest.mark.parametrize("schedule", [
    pytest.param(COURSE_SCHEDULE, id="course",
                 marks=pytest.mark.course(f"{DAY_4}::test_task_2_batched_paged_attention_matches_dense_attention")),
    pytest.param(SCHEDULE, id="with-a-removal", marks=pytest.mark.beyond_course),
])
def test_batch_metadata_pads_rows_and_empties_slots(
    pool_type: type, cache_type: type, batching_cache_type: type, paged_attention: object,
    schedule: list[tuple[int, str, int, int]], rng: np.random.Generator,
) -> None:
    import mlx.core as mx

    course = schedule is COURSE_SCHEDULE
    slots = COURSE_MAX_BATCH if course else SLOTS
    pool = pool_type(4)
    batching = batching_cache_type(slots, MAX_SEQ_LEN)
    live: dict[int, tuple[object, WrittenKv]] = {}
    for step in range(COURSE_STEPS if course else STEPS):
        for _, action, slot, prefill in (event for event in schedule if event[0] == step):
            if action == "add":
                cache, record = cache_type(pool), WrittenKv(NUM_KV_HEADS, COURSE_HEAD_DIM, "float32")
                chunk = record.make_chunk(rng, prefill)
                # A course case's prefill in pieces that each open one new page at most, as the course's paged
                # appends whose pages it reads (calls.course_paged_append).
                if course:
                    course_paged_append(cache, *chunk)
                else:
                    cache.update_and_fetch_paged(*chunk)
                batching.add_request(cache, slot)
                live[slot] = (cache, record)
            else:
                batching.remove_request(slot)
                del live[slot]
        empty = mx.zeros((1, NUM_KV_HEADS, 1, COURSE_HEAD_DIM), dtype=mx.float32)
        chunks = [live[s][1].make_chunk(rng, 1) if s in live else (empty, empty) for s in range(slots)]
        # The course's decode call: mask_length 1 and a causal mask (one query row: the same as none); its
        # attention then gets the metadata's own mask.
        handed = batching.update_and_fetch_paged(
            mx.concatenate([k for k, _ in chunks]), mx.concatenate([v for _, v in chunks]), mask_length=1,
            mask="causal",
        )
        metadata = read_once(handed)  # what the attention gets
        where = f"decode step {step}, live slots {sorted(live)} with contexts {[live[s][1].length for s in sorted(live)]}"

        query = rng.standard_normal((slots, NUM_Q_HEADS, 1, COURSE_HEAD_DIM)).astype(np.float32)
        want = np.zeros(query.shape)
        for slot, (_, record) in live.items():
            want[slot : slot + 1] = record.attention(query[slot : slot + 1], "causal")
        got = attention_over_metadata(paged_attention, query, metadata, "causal", own_mask=course)
        # The table and contexts read again after the attention, as the course's batch test reads them.
        _check_step(batching, read_once(handed), live, where, exact_width=False, course=course, slots=slots)
        layout = metadata_layout(query, metadata, "float32", "causal", 4)
        expect_pages_hold(INVARIANT, f"{where}: the batch metadata", layout, {s: r for s, (_, r) in live.items()})
        # The course compares the live rows only; an empty slot's output is beyond it (empty_rows).
        rows = sorted(live)
        expect_close(INVARIANT, f"{where}: attention over the batch metadata (live slots)", got[rows], want[rows], layout)


@pytest.mark.replays_the_course
@pytest.mark.course(f"{DAY_4}::test_task_2_batched_paged_attention_matches_dense_attention")
def test_the_courses_batch_of_two_requests_and_an_empty_slot(
    pool_type: type, cache_type: type, batching_cache_type: type, paged_attention: object, rng: np.random.Generator
) -> None:
    """The course's own batch, as it builds and reads it: requests of 3 and 6 tokens in slots 0 and 2 of 3, one
    decode token each; attention over the metadata with its own mask matches each request's (over the query as it
    reads after the call), and the metadata, read again after the attention, holds the pool's 3 pages, a table
    exactly 2 wide with slot 1 all -1, and contexts 4, 0 and 7."""
    import mlx.core as mx

    records = [WrittenKv(NUM_KV_HEADS, COURSE_HEAD_DIM, "float32") for _ in range(2)]
    (first, second), handed = the_courses_batch_step(
        pool_type, cache_type, batching_cache_type, lambda request, n: records[request].make_chunk(rng, n)
    )
    metadata = read_once(handed)  # what the attention gets
    where = "the course's batch (3 and 6 tokens in slots 0 and 2 of 3, then one decode token each)"
    given = mx.array(rng.standard_normal((3, 4, 1, COURSE_HEAD_DIM)).astype(np.float32))
    out = attention_as_the_course_calls(paged_attention, given, metadata)
    # The course slices it per row (paged_output[0:1]) into assert_allclose, which reads an array's dtype first.
    expect_arrays(INVARIANT, f"{where}: paged_attention", out)
    got = to_numpy(out, np.float64)
    # After the attention, as the course's test reads them: the query it passed (its dense outputs are computed from
    # that very array after the call) and the metadata's fields, read again (a field that changed in place or is
    # gone by then fails there).
    query = to_numpy(given)
    seen = read_once(handed)
    lens = course_tolist(seen, "context_lens")
    expect(equals_list(lens, [4, 0, 7]), INVARIANT, f"{where}: context_lens.tolist() {lens!r:.200}, expected [4, 0, 7]")
    # The course reads the table's own .shape and .tolist(): a table of the subject's own answers them itself, and
    # so does an array of a subclass of the subject's own (an MLX one included, which to_numpy would copy).
    table = seen.handed.get("block_table", seen.block_table)
    shape = to_numpy(table).shape if table is None else table.shape
    expect(shape == (3, 2), INVARIANT, f"{where}: block_table shape {shape!r}, expected (3, 2)")
    empty = _item(course_tolist(seen, "block_table"), 1)
    expect(equals_list(empty, [-1, -1]), INVARIANT, f"{where}: the empty slot's row is {empty!r:.200}")
    shapes = (seen.key_pages.shape, seen.value_pages.shape)  # their own .shape, as the course compares it
    expect(shapes == ((3, NUM_KV_HEADS, 4, COURSE_HEAD_DIM),) * 2, INVARIANT,
           f"{where}: key/value_pages shapes {shapes}, expected the pool's 3 pages, (3, 2, 4, 4)")  # fmt: skip
    layout = metadata_layout(query, metadata, "float32", "causal", 4)
    for slot, record, cache in ((0, records[0], first), (2, records[1], second)):
        expect_close(INVARIANT, f"{where}: slot {slot}'s output", got[slot : slot + 1],
                     record.attention(query[slot : slot + 1], "causal"), layout)  # fmt: skip
        # After the attention, as the course's batch test reads it.
        expect_close_to_its_gather(INVARIANT, f"{where}: slot {slot}'s output", got[slot : slot + 1],
                                   query[slot : slot + 1], gathered(INVARIANT, cache), layout)  # fmt: skip


def _item(value: object, index: int) -> object:
    """value[index] as the course's assert reads it, or the exception it raised (which no list equals)."""
    try:
        return value[index]  # type: ignore[index]
    except Exception as exc:  # noqa: BLE001 - the course's assert fails on it
        return exc


# Prefill chunks appended through the batch, each crossing a page boundary for some row, then a decode step.
PREFILL_CHUNKS = (3, 6, 4, 1)


@pytest.mark.beyond_course
def test_prefill_chunks_through_the_batch_count_every_token(
    pool_type: type, cache_type: type, batching_cache_type: type, paged_attention: object, rng: np.random.Generator
) -> None:
    import mlx.core as mx

    pool = pool_type(4)
    batching = batching_cache_type(SLOTS, MAX_SEQ_LEN)
    live: dict[int, tuple[object, WrittenKv]] = {}
    for slot, prefill in ((0, 5), (2, 2)):
        cache, record = cache_type(pool), WrittenKv(NUM_KV_HEADS, HEAD_DIM, "float32")
        cache.update_and_fetch_paged(*record.make_chunk(rng, prefill))
        batching.add_request(cache, slot)
        live[slot] = (cache, record)
    for length in PREFILL_CHUNKS:
        empty = mx.zeros((1, NUM_KV_HEADS, length, HEAD_DIM), dtype=mx.float32)
        chunks = [live[s][1].make_chunk(rng, length) if s in live else (empty, empty) for s in range(SLOTS)]
        mask = "causal" if length > 1 else None
        metadata = read_once(batching.update_and_fetch_paged(
            mx.concatenate([k for k, _ in chunks]), mx.concatenate([v for _, v in chunks]), mask_length=length, mask=mask
        ))
        where = f"a chunk of {length} through the batch, live slots {sorted(live)} now at {[live[s][1].length for s in sorted(live)]}"
        _check_step(batching, metadata, live, where)

        query = rng.standard_normal((SLOTS, NUM_Q_HEADS, length, HEAD_DIM)).astype(np.float32)
        want = np.zeros(query.shape)
        for slot, (_, record) in live.items():
            want[slot : slot + 1] = record.attention(query[slot : slot + 1], mask)
        layout = metadata_layout(query, metadata, "float32", mask, 4)
        expect_pages_hold(INVARIANT, f"{where}: the batch metadata", layout, {s: r for s, (_, r) in live.items()})
        expect_close(
            INVARIANT, f"{where}: attention over the batch metadata", attention_over_metadata(paged_attention, query, metadata, mask),
            want, layout,
        )


MIXED_POOLS = f"{DAY_3}::test_task_2_mixed_pools_fail_before_any_batch_row_mutates"


@pytest.mark.replays_the_course
@pytest.mark.course(MIXED_POOLS)
def test_requests_on_two_pools_are_refused_before_any_row_changes(
    pool_type: type, cache_type: type, batching_cache_type: type,
) -> None:
    """As the course's test: two empty requests on two pools both join a batch; its decode append raises
    ValueError and changes no request nor pool (ids, lengths and counters, as the course's snapshot), and the
    batch's HD stays None."""
    import mlx.core as mx

    pools = [pool_type(4), pool_type(4)]
    caches = [cache_type(pool) for pool in pools]
    batching = batching_cache_type(2, 8)
    for slot, cache in enumerate(caches):
        batching.add_request(cache, slot)  # the course adds both: a refusal here fails its test
    # Each pool through cache.pool, as the course's snapshot (_paged_state) reads it.
    before = [(pool_state(cache.pool, page_data=False), cache_state(cache)) for cache in caches]
    keys = mx.zeros((2, NUM_KV_HEADS, 1, COURSE_HEAD_DIM), dtype=mx.float32)
    where = "a batched append over requests on two pools"
    message = expect_value_error(INVARIANT, where, lambda: batching.update_and_fetch_paged(keys, keys, mask_length=1))
    expect_course_phrase(INVARIANT, where, COURSE_PHRASES[MIXED_POOLS], message)
    for row, ((pool_before, cache_before), cache) in enumerate(zip(before, caches)):
        expect(
            same_pool_state(pool_before, pool_state(cache.pool, page_data=False)), INVARIANT,
            f"{where}: the pool of row {row} changed",
        )
        expect(cache_before == cache_state(cache), INVARIANT, f"{where}: the cache of row {row} changed")
    head = getattr(batching, "HD", "no HD attribute")
    expect(head is None, INVARIANT, f"{where}: the batch's HD is {head!r} after the refused append, expected None")
