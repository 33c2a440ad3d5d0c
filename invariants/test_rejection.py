"""rejection: invalid inputs raise ValueError naming the field, and change nothing.

Each case corrupts one thing in otherwise valid inputs. The call must raise
ValueError whose message names the field, and afterwards every input array,
and the pool and caches the pages came from, must be exactly as before. The
pool and cache reject bad writes and frees the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from pagecheck.invariants.calls import cache_state, like_pages, pool_state, same_pool_state
from pagecheck.invariants.verdict import InvariantViolation, expect, expect_value_error, same_array
from pagecheck.invariants.workload import WrittenKv
from pagecheck.reference.arrays import to_numpy
from pagecheck.reference.layouts import random_layout, round_to_dtype

INVARIANT = "rejection"
pytestmark = pytest.mark.invariant(INVARIANT)

PAGE_SIZE = 4
CONTEXTS = (2 * PAGE_SIZE + 1, PAGE_SIZE)  # three pages and one page
WIDTH = 4  # block-table columns: one past the widest row
HEAD_DIM = 32

Inputs = dict[str, Any]


def _live(inputs: Inputs) -> set[int]:
    table, lens = inputs["block_table"], inputs["context_lens"]
    return {int(table[b, c]) for b in range(len(lens)) for c in range(-(-int(lens[b]) // PAGE_SIZE))}


def _spare_page(inputs: Inputs) -> int:
    return min(set(range(inputs["key_pages"].shape[0])) - _live(inputs))


def _set_table(row: int, col: int, value: Callable[[Inputs], int]) -> Callable[[Inputs], Inputs]:
    def corrupt(inputs: Inputs) -> Inputs:
        table = inputs["block_table"].copy()
        table[row, col] = value(inputs)
        return {**inputs, "block_table": table}

    return corrupt


def _set(**changes: Any) -> Callable[[Inputs], Inputs]:
    return lambda inputs: {**inputs, **{k: v(inputs) if callable(v) else v for k, v in changes.items()}}


@dataclass(frozen=True)
class Rejection:
    name: str
    fields: tuple[str, ...]  # the message must name one of these
    corrupt: Callable[[Inputs], Inputs]
    pages_untouched: bool = True  # the corrupted inputs still use the pool's own page arrays


def _longer_query(inputs: Inputs) -> np.ndarray:
    return np.repeat(inputs["query"], 3, axis=2)


REJECTIONS = [
    Rejection("negative_context", ("context_lens",), _set(context_lens=lambda i: np.array([CONTEXTS[0], -1], np.int32))),
    Rejection("table_too_narrow", ("block_table", "context_lens"), _set(block_table=lambda i: i["block_table"][:, :2].copy())),
    Rejection("live_id_negative", ("block_table",), _set_table(0, 1, lambda i: -1)),
    Rejection("live_id_below_minus_one", ("block_table",), _set_table(0, 0, lambda i: -5)),
    Rejection("live_id_past_the_pool", ("block_table",), _set_table(0, 2, lambda i: i["key_pages"].shape[0])),
    Rejection("aliased_id", ("block_table",), _set_table(1, 0, lambda i: int(i["block_table"][0, 1]))),
    Rejection("padding_not_minus_one", ("block_table",), _set_table(1, 3, lambda i: -2)),
    Rejection("live_id_in_padding", ("block_table",), _set_table(1, 2, _spare_page)),
    Rejection(
        "context_shorter_than_query", ("context_lens",),
        _set(query=_longer_query, mask="causal", context_lens=lambda i: np.array([CONTEXTS[0], 2], np.int32)),
    ),
    Rejection("page_size_zero", ("page_size",), _set(page_size=0)),
    Rejection("page_size_negative", ("page_size",), _set(page_size=-PAGE_SIZE)),
    Rejection("mismatched_dtypes", ("dtype",), _set(query_dtype="float16"), pages_untouched=False),
    Rejection(
        "q_heads_not_a_multiple_of_kv_heads", ("H_q", "head"),
        _set(query=lambda i: i["query"][:, :3].copy()), pages_untouched=False,
    ),
]


def _call(paged_attention: Any, inputs: Inputs) -> dict[str, Any]:
    """Call with MLX inputs; return the exact objects passed, to inspect afterwards."""
    import mlx.core as mx

    query = inputs["query"]
    passed = {
        "query": like_pages(query, inputs["key_pages"]) if inputs["query_dtype"] is None
        else mx.array(query).astype(getattr(mx, inputs["query_dtype"])),
        "key_pages": inputs["key_pages"],
        "value_pages": inputs["value_pages"],
        "block_table": mx.array(inputs["block_table"]),
        "context_lens": mx.array(inputs["context_lens"]),
    }
    snapshot = {name: to_numpy(array).copy() for name, array in passed.items()}
    try:
        paged_attention(**passed, page_size=inputs["page_size"], mask=inputs["mask"])
    except ValueError as exc:
        for name, array in passed.items():
            expect(same_array(array, snapshot[name]), INVARIANT, f"the rejected call changed its input {name}")
        return {"message": str(exc)}
    raise InvariantViolation(INVARIANT, "no ValueError was raised")


def _check_rejected(paged_attention: Any, case: Rejection, inputs: Inputs) -> None:
    try:
        message = _call(paged_attention, case.corrupt(inputs))["message"]
    except InvariantViolation as exc:
        raise InvariantViolation(INVARIANT, f"{case.name}: {str(exc).split('] ', 1)[1]}") from None
    expect(
        any(field.lower() in message.lower() for field in case.fields), INVARIANT,
        f"{case.name}: the ValueError names none of {case.fields}: {message!r}",
    )


@pytest.mark.parametrize("case", REJECTIONS, ids=[c.name for c in REJECTIONS])
def test_invalid_inputs_are_rejected_unchanged(paged_attention: Any, case: Rejection, rng: np.random.Generator) -> None:
    layout = random_layout(rng, context_lens=CONTEXTS, page_size=PAGE_SIZE, spare_pages=1, extra_columns=1)
    arrays = layout.as_mx()
    inputs = {
        "query": layout.query, "key_pages": arrays["key_pages"], "value_pages": arrays["value_pages"],
        "block_table": layout.block_table, "context_lens": layout.context_lens, "page_size": PAGE_SIZE,
        "mask": None, "query_dtype": None,
    }
    _check_rejected(paged_attention, case, inputs)


POOL_CASES = [c for c in REJECTIONS if c.pages_untouched]


@pytest.mark.parametrize("case", POOL_CASES, ids=[c.name for c in POOL_CASES])
def test_rejected_call_on_cache_metadata_leaves_pool_and_caches_unchanged(
    paged_attention: Any, pool_type: type, cache_type: type, case: Rejection, rng: np.random.Generator
) -> None:
    pool = pool_type(PAGE_SIZE)
    caches = [cache_type(pool) for _ in range(3)]
    for cache, tokens in zip(caches, (*CONTEXTS, 1)):
        cache.update_and_fetch_paged(*WrittenKv(2, HEAD_DIM, "float32").make_chunk(rng, tokens))
    caches.pop().release()  # leaves a free page, so a spare id exists
    table = np.full((2, WIDTH), -1, dtype=np.int32)
    for row, cache in enumerate(caches):
        table[row, : cache.num_pages] = [int(p) for p in cache.page_ids]
    inputs = {
        "query": round_to_dtype(rng.standard_normal((2, 4, 1, HEAD_DIM)), "float32"),
        "key_pages": pool.key_pages, "value_pages": pool.value_pages, "block_table": table,
        "context_lens": np.array(CONTEXTS, dtype=np.int32), "page_size": PAGE_SIZE, "mask": None, "query_dtype": None,
    }
    pool_before, caches_before = pool_state(pool), [cache_state(c) for c in caches]
    _check_rejected(paged_attention, case, inputs)
    expect(same_pool_state(pool_before, pool_state(pool)), INVARIANT, f"{case.name}: the rejected call changed the pool")
    expect(
        caches_before == [cache_state(c) for c in caches], INVARIANT, f"{case.name}: the rejected call changed a cache"
    )


def _write_past_page_end(pool: Any, cache: Any, chunk: tuple[Any, Any]) -> None:
    pool.write_page_slice(int(cache.page_ids[-1]), PAGE_SIZE - 1, chunk[0][:, :, :2], chunk[1][:, :, :2])


def _free_unissued_page(pool: Any, cache: Any, chunk: tuple[Any, Any]) -> None:
    pool.free_page(pool.num_pages + 3)


def _append_mismatched_value(pool: Any, cache: Any, chunk: tuple[Any, Any]) -> None:
    cache.update_and_fetch_paged(chunk[0], chunk[1][:, :, :1])


POOL_REJECTIONS = {
    "write_past_page_end": _write_past_page_end,
    "free_unissued_page": _free_unissued_page,
    "append_value_shape_differs_from_key": _append_mismatched_value,
}


@pytest.mark.parametrize("name", sorted(POOL_REJECTIONS))
def test_pool_and_cache_reject_bad_calls_unchanged(
    pool_type: type, cache_type: type, name: str, rng: np.random.Generator
) -> None:
    pool = pool_type(PAGE_SIZE)
    cache = cache_type(pool)
    record = WrittenKv(2, HEAD_DIM, "float32")
    cache.update_and_fetch_paged(*record.make_chunk(rng, PAGE_SIZE + 1))
    chunk = record.make_chunk(rng, 3)
    pool_before, cache_before = pool_state(pool), cache_state(cache)
    expect_value_error(INVARIANT, name, lambda: POOL_REJECTIONS[name](pool, cache, chunk))
    expect(same_pool_state(pool_before, pool_state(pool)), INVARIANT, f"{name}: the rejected call changed the pool")
    expect(cache_before == cache_state(cache), INVARIANT, f"{name}: the rejected call changed the cache")
