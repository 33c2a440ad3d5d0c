"""batching_cache: BatchingKvCache turns its active requests into one batch of paged metadata.

Requests join and leave slots between decode steps. At every step the block
table has one row per slot, as wide as the widest request: a live row lists
that request's pages in order then -1, an empty slot is all -1 with context 0,
and the context of a live row is what that request has written. Attention
over the metadata gives each live row its own request's output and empty
rows zeros.
"""

from __future__ import annotations

import numpy as np
import pytest

from invariants.calls import attention_over_metadata, metadata_layout
from invariants.course import DAY_4
from invariants.verdict import expect, expect_close
from invariants.workload import WrittenKv
from reference.arrays import to_numpy

INVARIANT = "batching_cache"
pytestmark = pytest.mark.invariant(INVARIANT)

SLOTS = 4
MAX_SEQ_LEN = 64
HEAD_DIM = 32
NUM_KV_HEADS = 2
NUM_Q_HEADS = 4

# Decode steps, and what happens to the slots before each: (step, "add" or "remove", slot, prefill).
SCHEDULE = [(0, "add", 0, 9), (0, "add", 2, 3), (2, "add", 3, 1), (3, "remove", 0, 0), (4, "add", 0, 5)]
STEPS = 7


def _check_step(batching: object, metadata: object, live: dict[int, tuple[object, WrittenKv]], step: str) -> None:
    table = to_numpy(metadata.block_table)
    lens = to_numpy(metadata.context_lens).tolist()
    width = max(cache.num_pages for cache, _ in live.values())
    expect(table.shape == (SLOTS, width), INVARIANT, f"{step}: block_table shape {table.shape}, expected {(SLOTS, width)}")
    for slot in range(SLOTS):
        row = [int(p) for p in table[slot]]
        if slot in live:
            cache, record = live[slot]
            pages = [int(p) for p in cache.page_ids]
            want_row, want_len = pages + [-1] * (width - len(pages)), record.length
        else:
            want_row, want_len = [-1] * width, 0
        expect(row == want_row, INVARIANT, f"{step}: slot {slot} table row {row}, expected {want_row}")
        expect(lens[slot] == want_len, INVARIANT, f"{step}: slot {slot} context {lens[slot]}, expected {want_len}")


@pytest.mark.course(f"{DAY_4}::test_task_2_batched_paged_attention_matches_dense_attention")
def test_batch_metadata_pads_rows_and_empties_slots(
    pool_type: type, cache_type: type, batching_cache_type: type, paged_attention: object, rng: np.random.Generator
) -> None:
    import mlx.core as mx

    pool = pool_type(4)
    batching = batching_cache_type(SLOTS, MAX_SEQ_LEN)
    live: dict[int, tuple[object, WrittenKv]] = {}
    for step in range(STEPS):
        for _, action, slot, prefill in (event for event in SCHEDULE if event[0] == step):
            if action == "add":
                cache, record = cache_type(pool), WrittenKv(NUM_KV_HEADS, HEAD_DIM, "float32")
                cache.update_and_fetch_paged(*record.make_chunk(rng, prefill))
                batching.add_request(cache, slot)
                live[slot] = (cache, record)
            else:
                batching.remove_request(slot)
                del live[slot]
        empty = mx.zeros((1, NUM_KV_HEADS, 1, HEAD_DIM), dtype=mx.float32)
        chunks = [live[s][1].make_chunk(rng, 1) if s in live else (empty, empty) for s in range(SLOTS)]
        metadata = batching.update_and_fetch_paged(
            mx.concatenate([k for k, _ in chunks]), mx.concatenate([v for _, v in chunks])
        )
        where = f"decode step {step}, live slots {sorted(live)} with contexts {[live[s][1].length for s in sorted(live)]}"
        _check_step(batching, metadata, live, where)

        query = rng.standard_normal((SLOTS, NUM_Q_HEADS, 1, HEAD_DIM)).astype(np.float32)
        want = np.zeros(query.shape)
        for slot, (_, record) in live.items():
            want[slot : slot + 1] = record.attention(query[slot : slot + 1], None)
        expect_close(
            INVARIANT, f"{where}: attention over the batch metadata", attention_over_metadata(paged_attention, query, metadata, None),
            want, metadata_layout(query, metadata, "float32", None),
        )
