"""rejection: invalid inputs raise ValueError and change nothing; a failed append changes nothing either.

Each case corrupts one thing in otherwise valid inputs. The call must raise
ValueError, and afterwards every input array, and the pool and caches the
pages came from, must be exactly as before. A message that names none of the
case's fields is recorded as advice, not failed: the course's own messages
say "outside physical page storage" or "aliased" without the field's name.
The pool and cache reject bad writes and frees the same way, and an append
whose second page write fails (a failure injected into the pool's
write_page_slice, as the course's test does) leaves pool and cache as they
were; beyond the course, that cache then appends where it left off.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from pagecheck.invariants.calls import (
    append_for_the_courses_call, attention_over_metadata, cache_state, call_attention, course_query, fail_on_call,
    metadata_layout, pool_state, same_pool_state,
)
from pagecheck.invariants.course import (
    COURSE_FIRST_PAGED_APPEND, COURSE_HEAD_DIM, COURSE_PHRASES, DAY_3, DAY_4, INVALID_METADATA,
)
from pagecheck.invariants.subject import Subject
from pagecheck.invariants.verdict import (
    InvariantViolation, expect, expect_close, expect_course_phrase, expect_pages_hold, expect_value_error, raised_message,
    same_array, same_tokens,
)
from pagecheck.invariants.workload import WrittenKv
from pagecheck.reference.arrays import to_numpy
from pagecheck.reference.layouts import COURSE_UNUSED_FILL, random_layout, round_to_dtype

Advise = Callable[[str], None]

INVARIANT = "rejection"
pytestmark = pytest.mark.invariant(INVARIANT)

PAGE_SIZE = 4
CONTEXTS = (2 * PAGE_SIZE + 1, PAGE_SIZE)  # three pages and one page
WIDTH = 3  # block-table columns: the widest row's, as the course's tables (3 at most: COURSE_MAX_PAGES)
# The course's head dim (its chunks' 4) for every case: a rejection does not depend on it, and an implementation
# the course accepts may take only the head dims its tests use.
HEAD_DIM = COURSE_HEAD_DIM

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
    # The request whose row the corruption touches: a course case sends that one alone, as every course rejection
    # is one request.
    row: int = 0


def _longer_query(inputs: Inputs) -> np.ndarray:
    return np.repeat(inputs["query"], 3, axis=2)


def _one_request_shorter_than_its_query(inputs: Inputs) -> Inputs:
    """The course's case ("direct"): one request, a query of 2 rows over a context of 1 (the second row's page).
    Every course call of more than one query row is one request, so the batched case is beyond the course."""
    return {**inputs, "query": np.repeat(inputs["query"][1:2], 2, axis=2), "mask": "causal",
            "block_table": inputs["block_table"][1:2].copy(), "context_lens": np.array([1], np.int32)}  # fmt: skip


REJECTIONS = [
    Rejection("negative_context", ("context_lens",), _set(context_lens=lambda i: np.array([CONTEXTS[0], -1], np.int32)),
              row=1),
    Rejection("table_too_narrow", ("block_table", "context_lens"), _set(block_table=lambda i: i["block_table"][:, :2].copy())),
    Rejection("live_id_negative", ("block_table",), _set_table(0, 1, lambda i: -1)),
    Rejection("live_id_below_minus_one", ("block_table",), _set_table(0, 0, lambda i: -5)),
    Rejection("live_id_past_the_pool", ("block_table",), _set_table(0, 2, lambda i: i["key_pages"].shape[0])),
    # The course's aliasing case repeats a page within one row; rows sharing a page is beyond it.
    Rejection("aliased_id", ("block_table",), _set_table(0, 1, lambda i: int(i["block_table"][0, 0]))),
    Rejection("aliased_across_rows", ("block_table",), _set_table(1, 0, lambda i: int(i["block_table"][0, 1]))),
    Rejection("padding_not_minus_one", ("block_table",), _set_table(1, 1, lambda i: -2), row=1),
    # The course's case is a live id right after the live range ([[0, 1, -1]], context 1); one further on is beyond.
    Rejection("live_id_in_padding", ("block_table",), _set_table(1, 1, _spare_page), row=1),
    Rejection("live_id_later_in_padding", ("block_table",), _set_table(1, 2, _spare_page), row=1),
    Rejection("context_shorter_than_query", ("context_lens",), _one_request_shorter_than_its_query),
    Rejection(
        "context_shorter_than_query_in_a_batch", ("context_lens",),
        _set(query=_longer_query, mask="causal", context_lens=lambda i: np.array([CONTEXTS[0], 2], np.int32)),
    ),
    Rejection("page_size_zero", ("page_size",), _set(page_size=0)),
    Rejection("page_size_negative", ("page_size",), _set(page_size=-PAGE_SIZE)),
    Rejection("mismatched_dtypes", ("dtype",), _set(query_dtype="bfloat16"), pages_untouched=False),
    Rejection(
        "q_heads_not_a_multiple_of_kv_heads", ("H_q", "head"),
        _set(query=lambda i: i["query"][:, :3].copy()), pages_untouched=False,
    ),
]


def _call(paged_attention: Any, inputs: Inputs, advise: Advise | None = None) -> dict[str, Any]:
    """Call with MLX inputs: it must raise ValueError; {"message": its message}. An input the rejected call
    changed fails, or with `advise` (a course case: the course never reads an input again) is advice."""
    import mlx.core as mx

    query = inputs["query"]
    passed = {
        "query": course_query(query, inputs["key_pages"]) if inputs["query_dtype"] is None
        else mx.array(query).astype(getattr(mx, inputs["query_dtype"])),
        "key_pages": inputs["key_pages"],
        "value_pages": inputs["value_pages"],
        "block_table": mx.array(inputs["block_table"]),
        "context_lens": mx.array(inputs["context_lens"]),
    }
    snapshot = {name: to_numpy(array).copy() for name, array in passed.items()}
    try:
        call_attention(paged_attention, {**passed, "page_size": inputs["page_size"], "mask": inputs["mask"]})
    except ValueError as exc:
        for name, array in passed.items():
            _expect_or_advise(same_array(array, snapshot[name]), f"the rejected call changed its input {name}", advise)
        return {"message": str(exc)}
    raise InvariantViolation(INVARIANT, "no ValueError was raised")


# The course's cases of the same rules (invariants/course.py); the rest are beyond the course.
COURSE_CASES: dict[str, tuple[str, ...]] = {
    "negative_context": (f"{INVALID_METADATA}[negative-context]",),
    "table_too_narrow": (f"{INVALID_METADATA}[oversized-context]", f"{INVALID_METADATA}[insufficient-table-width]"),
    "live_id_negative": (f"{INVALID_METADATA}[negative-live-page]",),
    "live_id_past_the_pool": (f"{INVALID_METADATA}[page-id-equals-domain]",),
    "aliased_id": (f"{INVALID_METADATA}[aliased-live-page]",),
    "padding_not_minus_one": (f"{INVALID_METADATA}[invalid-padding-sentinel]",),
    "live_id_in_padding": (f"{INVALID_METADATA}[live-page-in-padding]",),
    "context_shorter_than_query": (f"{DAY_4}::test_paged_attention_rejects_active_context_shorter_than_query",),
    "page_size_zero": (f"{INVALID_METADATA}[zero-page-size]",),
}


def _params(cases: list[Rejection]) -> list[Any]:
    """One pytest.param per case, marked with its course tests or as beyond the course."""
    return [
        pytest.param(
            case, id=case.name,
            marks=pytest.mark.course(*COURSE_CASES[case.name]) if case.name in COURSE_CASES
            else pytest.mark.beyond_course,
        )
        for case in cases
    ]


def _advise_on_fields(advise: Advise, name: str, fields: tuple[str, ...], message: str) -> None:
    if not any(field.lower() in message.lower() for field in fields):
        advise(f"{name}: the ValueError names none of {fields}: {message!r}")


def _expect_or_advise(holds: bool, message: str, advise: Advise | None) -> None:
    """A failure of this check, or with `advise` advice: what the course does not check."""
    if advise is None:
        expect(holds, INVARIANT, message)
    elif not holds:
        advise(f"{message} (beyond the course, which never reads it again)")


def _one_request(inputs: Inputs, row: int) -> Inputs:
    """`inputs` cut to request `row` alone, as the course sends every rejected call."""
    return {**inputs, "query": inputs["query"][row : row + 1], "block_table": inputs["block_table"][row : row + 1],
            "context_lens": inputs["context_lens"][row : row + 1]}  # fmt: skip


def _check_rejected(paged_attention: Any, case: Rejection, inputs: Inputs, advise: Advise) -> None:
    """The corrupted call must be rejected. A course case sends the corrupted request alone and takes a changed
    input as advice."""
    course = case.name in COURSE_CASES
    corrupted = case.corrupt(inputs)
    if course and len(corrupted["context_lens"]) > 1:
        corrupted = _one_request(corrupted, case.row)
    try:
        message = _call(paged_attention, corrupted, advise if course else None)["message"]
    except InvariantViolation as exc:
        raise InvariantViolation(INVARIANT, f"{case.name}: {str(exc).split('] ', 1)[1]}") from None
    _advise_on_fields(advise, case.name, case.fields, message)


@pytest.mark.parametrize("case", _params(REJECTIONS))
def test_invalid_inputs_are_rejected_unchanged(
    paged_attention: Any, case: Rejection, rng: np.random.Generator, advise: Advise
) -> None:
    # A course case's pages hold finite values only, as the course's rejection tests' zeros do: a validator may
    # refuse non-finite pages (FloatingPointError) before it reads the metadata.
    fill = COURSE_UNUSED_FILL if case.name in COURSE_CASES else np.nan
    layout = random_layout(
        rng, context_lens=CONTEXTS, page_size=PAGE_SIZE, spare_pages=1, extra_columns=WIDTH - 3, head_dim=HEAD_DIM,
        unused_fill=fill,
    )
    arrays = layout.as_mx()
    inputs = {
        "query": layout.query, "key_pages": arrays["key_pages"], "value_pages": arrays["value_pages"],
        "block_table": layout.block_table, "context_lens": layout.context_lens, "page_size": PAGE_SIZE,
        "mask": "causal", "query_dtype": None,  # as the course calls: one query row, so the same as no mask
    }
    _check_rejected(paged_attention, case, inputs, advise)


POOL_CASES = [c for c in REJECTIONS if c.pages_untouched]


@pytest.mark.parametrize("case", _params(POOL_CASES))
def test_rejected_call_on_cache_metadata_leaves_pool_and_caches_unchanged(
    paged_attention: Any, pool_type: type, cache_type: type, case: Rejection, rng: np.random.Generator, advise: Advise
) -> None:
    pool = pool_type(PAGE_SIZE)
    caches = [cache_type(pool) for _ in range(3)]
    for cache, tokens in zip(caches, (*CONTEXTS, COURSE_FIRST_PAGED_APPEND)):  # each opened as the course does
        cache.update_and_fetch_paged(*WrittenKv(2, HEAD_DIM, "float32").make_chunk(rng, tokens))
    caches.pop().release()  # leaves a free page, so a spare id exists
    table = np.full((2, WIDTH), -1, dtype=np.int32)
    for row, cache in enumerate(caches):
        table[row, : cache.num_pages] = [int(p) for p in cache.page_ids]
    inputs = {
        "query": round_to_dtype(rng.standard_normal((2, 4, 1, HEAD_DIM)), "float32"),
        "key_pages": pool.key_pages, "value_pages": pool.value_pages, "block_table": table,
        "context_lens": np.array(CONTEXTS, dtype=np.int32), "page_size": PAGE_SIZE, "mask": "causal",
        "query_dtype": None,
    }
    pool_before, caches_before = pool_state(pool), [cache_state(c) for c in caches]
    _check_rejected(paged_attention, case, inputs, advise)
    # The course reads nothing after a rejected attention call: in its cases a change is advice.
    unchanged_advice = advise if case.name in COURSE_CASES else None
    _expect_or_advise(same_pool_state(pool_before, pool_state(pool)), f"{case.name}: the rejected call changed the pool",
                      unchanged_advice)  # fmt: skip
    _expect_or_advise(caches_before == [cache_state(c) for c in caches],
                      f"{case.name}: the rejected call changed a cache", unchanged_advice)  # fmt: skip


def _write_past_page_end(pool: Any, cache: Any, chunk: tuple[Any, Any]) -> None:
    pool.write_page_slice(int(cache.page_ids[-1]), PAGE_SIZE - 1, chunk[0][:, :, :2], chunk[1][:, :, :2])


def _free_unissued_page(pool: Any, cache: Any, chunk: tuple[Any, Any]) -> None:
    pool.free_page(pool.num_pages + 3)


def _free_id_equal_to_page_count(pool: Any, cache: Any, chunk: tuple[Any, Any]) -> None:
    pool.free_page(pool.num_pages)  # one past the last id issued


def _append_mismatched_value(pool: Any, cache: Any, chunk: tuple[Any, Any]) -> None:
    cache.update_and_fetch_paged(chunk[0], chunk[1][:, :, :1])


def _append_in_another_dtype(pool: Any, cache: Any, chunk: tuple[Any, Any]) -> None:
    import mlx.core as mx

    # One token, as the course's: it sends bfloat16 to update_and_fetch_paged one decode token at a time.
    cache.update_and_fetch_paged(chunk[0][:, :, :1].astype(mx.bfloat16), chunk[1][:, :, :1].astype(mx.bfloat16))


@dataclass(frozen=True)
class PoolRejection:
    name: str
    call: Callable[[Any, Any, tuple[Any, Any]], None]
    fields: tuple[str, ...]  # advice when the message names none of these
    course: tuple[str, ...] = ()  # the course tests of the same rule; none: beyond the course
    # Tokens the cache holds before the call. A course case starts where the course's test does (its rule is
    # checked there only); its twin beyond the course starts mid-page, where the rejected call needs no new page.
    prefill: int = PAGE_SIZE + 1
    chunk: int = 3  # tokens in the chunk the call is made from (a course case: the course's own)


POOL_REJECTIONS = [
    PoolRejection("write_past_page_end", _write_past_page_end, ("start", "page")),
    PoolRejection("free_unissued_page", _free_unissued_page, ("page",)),
    PoolRejection("free_id_equal_to_page_count", _free_id_equal_to_page_count, ("page",)),
    PoolRejection(
        "append_value_shape_differs_from_key", _append_mismatched_value, ("shape",),
        (f"{DAY_3}::test_task_1_rejects_shape_mismatch_without_mutating_cache",), prefill=0, chunk=2,
    ),
    PoolRejection("append_value_shape_differs_from_key_mid_page", _append_mismatched_value, ("shape",)),
    PoolRejection(
        "append_dtype_differs_from_pool", _append_in_another_dtype, ("dtype",),
        (f"{DAY_3}::test_task_1_rejects_incompatible_dtype_before_allocating_a_page",), prefill=PAGE_SIZE,
    ),
    PoolRejection("append_dtype_differs_from_pool_mid_page", _append_in_another_dtype, ("dtype",)),
]


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, id=c.name, marks=pytest.mark.course(*c.course) if c.course else pytest.mark.beyond_course)
        for c in POOL_REJECTIONS
    ],
)
def test_pool_and_cache_reject_bad_calls_unchanged(
    pool_type: type, cache_type: type, case: PoolRejection, rng: np.random.Generator, advise: Advise
) -> None:
    pool = pool_type(PAGE_SIZE)
    cache = cache_type(pool)
    record = WrittenKv(2, HEAD_DIM, "float32")
    if case.prefill:
        cache.update_and_fetch_paged(*record.make_chunk(rng, case.prefill))
    chunk = record.make_chunk(rng, case.chunk)
    # The course's rejected appends compare ids, lengths and counters only (its _paged_state), so its cases do;
    # the twins beyond the course compare whole pages too.
    page_data = not case.course
    # Through cache.pool, as the course's snapshot (_paged_state) reads the pool.
    pool_before, cache_before = pool_state(cache.pool, page_data=page_data), cache_state(cache)
    message = expect_value_error(INVARIANT, case.name, lambda: case.call(pool, cache, chunk))
    if case.course:  # the course's own call on the course's own cache: its phrase as its test matches it
        expect_course_phrase(INVARIANT, case.name, COURSE_PHRASES[case.course[0]], message)
    _advise_on_fields(advise, case.name, case.fields, message)
    expect(
        same_pool_state(pool_before, pool_state(cache.pool, page_data=page_data)), INVARIANT,
        f"{case.name}: the rejected call changed the pool",
    )
    expect(cache_before == cache_state(cache), INVARIANT, f"{case.name}: the rejected call changed the cache")


# The course's invalid metadata, case by case as its test sends it: one request, three pages of 32 in storage, a
# table of three columns, context 65 (three live pages) or 1 (one live page, two of padding).
METADATA_PAGE_SIZE = 32
METADATA_PAGES = 3
METADATA_CONTEXT = 2 * METADATA_PAGE_SIZE + 1
METADATA_TABLE = (0, 1, 2)


@dataclass(frozen=True)
class MetadataCase:
    name: str
    context_lens: tuple[int, ...]
    block_table: tuple[int, ...]
    fields: tuple[str, ...]
    page_size: int = METADATA_PAGE_SIZE


def _with_column(column: int, value: int) -> tuple[int, ...]:
    return tuple(value if c == column else page for c, page in enumerate(METADATA_TABLE))


METADATA_CASES = {
    "negative-context": MetadataCase("negative-context", (-1,), METADATA_TABLE, ("context_lens",)),
    "oversized-context": MetadataCase(
        "oversized-context", (len(METADATA_TABLE) * METADATA_PAGE_SIZE + 1,), METADATA_TABLE, ("context_lens", "block_table")
    ),  # 97: one token past the three pages
    "insufficient-table-width": MetadataCase(
        "insufficient-table-width", (METADATA_CONTEXT,), METADATA_TABLE[:2], ("context_lens", "block_table")
    ),
    "negative-live-page": MetadataCase("negative-live-page", (METADATA_CONTEXT,), _with_column(1, -1), ("block_table",)),
    "page-id-equals-domain": MetadataCase(
        "page-id-equals-domain", (METADATA_CONTEXT,), _with_column(1, METADATA_PAGES), ("block_table",)
    ),
    "aliased-live-page": MetadataCase("aliased-live-page", (METADATA_CONTEXT,), _with_column(1, 0), ("block_table",)),
    "invalid-padding-sentinel": MetadataCase("invalid-padding-sentinel", (1,), (0, -2, -1), ("block_table",)),
    "live-page-in-padding": MetadataCase("live-page-in-padding", (1,), (0, 1, -1), ("block_table",)),
    "zero-page-size": MetadataCase("zero-page-size", (METADATA_CONTEXT,), METADATA_TABLE, ("page_size",), page_size=0),
}


def _rejected_unchanged(paged_attention: Any, what: str, passed: dict[str, Any], page_size: int, advise: Advise) -> str:
    """Call with `passed`; it must raise ValueError (the message is returned). A changed input is advice: these
    are the course's own cases, and it never reads an input again."""
    snapshot = {name: to_numpy(array).copy() for name, array in passed.items()}
    message = expect_value_error(
        INVARIANT, what, lambda: call_attention(paged_attention, {**passed, "page_size": page_size, "mask": "causal"})
    )
    for name, array in passed.items():
        _expect_or_advise(same_array(array, snapshot[name]), f"{what}: the rejected call changed its input {name}", advise)
    return message


def _course_shaped_inputs(num_queries: int, context_lens: tuple[int, ...], block_table: tuple[int, ...]) -> dict[str, Any]:
    """The course's shapes: float32 and D=4 for decode, bfloat16 and D=128 for longer queries."""
    import mlx.core as mx

    head_dim, dtype = (4, mx.float32) if num_queries == 1 else (128, mx.bfloat16)
    pages = (METADATA_PAGES, 2, METADATA_PAGE_SIZE, head_dim)
    return {
        "query": mx.zeros((1, 4, num_queries, head_dim), dtype=dtype),
        "key_pages": mx.zeros(pages, dtype=dtype),
        "value_pages": mx.zeros(pages, dtype=dtype),
        "block_table": mx.array([list(block_table)], dtype=mx.int32),
        "context_lens": mx.array(list(context_lens), dtype=mx.int32),
    }


@pytest.mark.parametrize("num_queries", [1, 9, 65])
@pytest.mark.parametrize(
    "case", [pytest.param(c, id=name, marks=pytest.mark.course(f"{INVALID_METADATA}[{name}]")) for name, c in METADATA_CASES.items()]
)
def test_invalid_metadata_is_rejected_at_every_query_length(
    paged_attention: Any, case: MetadataCase, num_queries: int, advise: Advise
) -> None:
    # Decode and both prefill paths validate alike: the rule does not depend on the kernel chosen.
    passed = _course_shaped_inputs(num_queries, case.context_lens, case.block_table)
    what = f"{case.name} at L={num_queries}"
    message = _rejected_unchanged(paged_attention, what, passed, case.page_size, advise)
    # The course's own inputs, so its phrase as its test matches it; a message naming none of the fields is advice.
    expect_course_phrase(INVARIANT, what, COURSE_PHRASES[f"{INVALID_METADATA}[{case.name}]"], message)
    _advise_on_fields(advise, case.name, case.fields, message)


CONTEXT_SHORTER_THAN_QUERY = f"{DAY_4}::test_paged_attention_rejects_active_context_shorter_than_query"


@pytest.mark.course(CONTEXT_SHORTER_THAN_QUERY)
@pytest.mark.parametrize("num_queries", [2, 9, 65])
def test_context_shorter_than_the_query_is_rejected_at_every_query_length(
    paged_attention: Any, num_queries: int, advise: Advise
) -> None:
    context = num_queries - 1
    live = -(-context // METADATA_PAGE_SIZE)
    table = tuple(range(live)) + (-1,) * (len(METADATA_TABLE) - live)
    passed = _course_shaped_inputs(num_queries, (context,), table)
    what = f"context {context} < L={num_queries}"
    message = _rejected_unchanged(paged_attention, what, passed, METADATA_PAGE_SIZE, advise)
    expect_course_phrase(INVARIANT, what, COURSE_PHRASES[CONTEXT_SHORTER_THAN_QUERY], message)
    _advise_on_fields(advise, "context_shorter_than_query", ("context_lens",), message)


def _live_tokens(cache: Any) -> tuple[np.ndarray, np.ndarray]:
    """The cache's tokens as its gather_dense() reads them (float64 [H_kv, tokens, D] each): through the course's
    API, not the pool's arrays, whose layout the course leaves to the pool."""
    keys, values = (to_numpy(x, np.float64) for x in cache.gather_dense())
    return keys[0], values[0]


INJECTED_FAILURE = "injected page write failure"


# (tokens of another request first, tokens already in the cache, tokens appended): the course's own case is a fresh
# pool and 5 tokens (its counters, storage included, must be as they were); the others fill the tail page first. Each
# cache is opened as the course opens one, with COURSE_FIRST_PAGED_APPEND tokens at least.
FAILED_WRITE_CASES = pytest.mark.parametrize(
    "others, filled, appended",
    [(0, 0, 5), (COURSE_FIRST_PAGED_APPEND, 0, 2 * PAGE_SIZE + 1), (COURSE_FIRST_PAGED_APPEND, 2, 2 * PAGE_SIZE - 1)],
    ids=["fresh-pool", "fresh-cache", "tail-half-full"],
)


def _append_whose_second_page_write_fails(
    pool_type: type, cache_type: type, others: int, filled: int, appended: int, rng: np.random.Generator,
    subject: Subject, read_tokens: bool = False,
) -> tuple[Any, WrittenKv, str]:
    """An append of `appended` tokens whose second page write fails (after `others` tokens of another request and
    `filled` of its own), checked to have changed nothing the course reads (ids, lengths and counters: a cache or
    pool may refuse reads from then on); with `read_tokens`, the tokens read through gather_dense() too. (The
    cache, its record, the step's description.)"""
    pool = pool_type(PAGE_SIZE)
    other, cache = cache_type(pool), cache_type(pool)
    if not callable(getattr(cache.pool, "write_page_slice", None)):  # patched there, as the course's test does
        pytest.skip("the subject's cache.pool has no write_page_slice to inject a failure into")
    other_record, record = WrittenKv(2, HEAD_DIM, "float32"), WrittenKv(2, HEAD_DIM, "float32")
    if others:
        other.update_and_fetch_paged(*other_record.make_chunk(rng, others))
    if filled:
        cache.update_and_fetch_paged(*record.make_chunk(rng, filled))
    # Page data is left out of the comparison: slots past a context may hold anything (the course compares none).
    # Through cache.pool, as the course's snapshot (_paged_state) reads the pool.
    pool_before, caches_before = pool_state(cache.pool, page_data=False), [cache_state(other), cache_state(cache)]
    # Installed where the subject lives (in grading, its sandboxed worker), as the course's test patches it.
    failing = fail_on_call(subject, cache.pool, "write_page_slice", 2, INJECTED_FAILURE)  # as the course patches it
    # Spans two pages at least (the tail page or a first page, then the next): the second write fails.
    spanning = WrittenKv(2, HEAD_DIM, "float32").make_chunk(rng, appended)
    raised = False
    try:
        cache.update_and_fetch_paged(*spanning)
    except RuntimeError as exc:
        # As the course's pytest.raises(RuntimeError, match=...) reads it: the message or a note (PEP 678) of the
        # RuntimeError the append raised (a cache may raise one of its own, the failure in its message or a note).
        if INJECTED_FAILURE not in raised_message(exc):
            raise
        raised = True
    writes = int(failing.calls)
    if writes < 2:
        pytest.skip(f"the subject's append wrote {writes} page slice(s) through pool.write_page_slice, not one per page")
    expect(raised, INVARIANT, "the append did not raise the failure injected into its second page write")
    step = f"after an append of {appended} tokens whose second page write failed ({filled} already written)"
    expect(writes == 2, INVARIANT, f"{step}: write_page_slice was called {writes} times, expected the failure to stop it at 2")
    expect(
        same_pool_state(pool_before, pool_state(cache.pool, page_data=False)), INVARIANT,
        f"{step}: the pool changed: {pool_before} -> {pool_state(cache.pool, page_data=False)}",
    )
    caches_after = [cache_state(other), cache_state(cache)]
    expect(caches_before == caches_after, INVARIANT, f"{step}: the caches changed: {caches_before} -> {caches_after}")
    for name, owner, written in (("the other request", other, other_record), ("the failed request", cache, record)):
        if written.length and read_tokens:
            keys, values = _live_tokens(owner)
            expect(
                same_tokens(keys, written.keys) and same_tokens(values, written.values), INVARIANT,
                f"{step}: {name}'s tokens read through gather_dense() changed",
            )
    return cache, record, step


@pytest.mark.course(f"{DAY_3}::test_task_1_rolls_back_every_page_when_a_later_write_fails")
@FAILED_WRITE_CASES
def test_append_whose_second_page_write_fails_changes_nothing(
    pool_type: type, cache_type: type, others: int, filled: int, appended: int, rng: np.random.Generator,
    subject: Subject,
) -> None:
    """The course reads only ids, lengths and counters after its injected failure, and appends nothing: a cache
    may refuse reads and appends from then on."""
    _append_whose_second_page_write_fails(pool_type, cache_type, others, filled, appended, rng, subject)


@pytest.mark.beyond_course
@FAILED_WRITE_CASES
def test_a_cache_whose_page_write_failed_appends_where_it_left_off(
    pool_type: type, cache_type: type, paged_attention: Any, others: int, filled: int, appended: int,
    rng: np.random.Generator, subject: Subject,
) -> None:
    cache, record, step = _append_whose_second_page_write_fails(
        pool_type, cache_type, others, filled, appended, rng, subject, read_tokens=True
    )
    # Its last token a decode with mask "causal", whose metadata's own mask the attention gets, as the course calls.
    metadata = append_for_the_courses_call(cache, *record.make_chunk(rng, PAGE_SIZE + 1))
    query = record.make_query(rng, 4, 1)  # a decode: the course attends with more rows only at its own prefill
    layout = metadata_layout(query, metadata, "float32", "causal", PAGE_SIZE)
    expect_pages_hold(INVARIANT, f"{step}, then an append of {PAGE_SIZE + 1}: the metadata", layout, {0: record})
    expect_close(
        INVARIANT, f"{step}, then an append of {PAGE_SIZE + 1}: attention over the cache",
        attention_over_metadata(paged_attention, query, metadata, "causal", own_mask=True),
        record.attention(query, "causal"), layout,
    )
