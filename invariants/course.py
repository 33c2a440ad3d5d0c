"""The course's own Week 3 Day 3/4 tests, and how each check of the suite relates to them.

Every check carries exactly one of
    @pytest.mark.course("test_week_3_day_3.py::test_x", ...)   the course tests whose behaviour it checks
    @pytest.mark.beyond_course                                 a behaviour no course test checks
and the run records it in the check's user_properties (("scope", "course" or
"beyond_course") and one ("course", id) per course test), so results, reports
and grades can count the course's clauses apart from the rest.

COURSE_TESTS lists the course tests about this API (pool, cache,
BatchingKvCache, paged_attention); a parametrised course test whose cases
check different rules is listed once per case id. OUTSIDE_THE_API lists the
rest of the two files, with why. tests/test_course_map.py holds the two lists
to the course's files and to invariants/COURSE_MAP.md, and requires every
entry of COURSE_TESTS to be mapped by at least one check.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import pytest

DAY_3 = "test_week_3_day_3.py"
DAY_4 = "test_week_3_day_4.py"
COURSE_FILES = (DAY_3, DAY_4)


@dataclass(frozen=True)
class Geometry:
    """The shapes one part of a check split by split_at_the_course draws from."""

    page_sizes: tuple[int, ...]
    kv_heads: tuple[int, ...]  # H_kv of the K/V written; queries have 2 heads per kv head unless a check says
    head_dim: int
    # The course part calls the subject only as the course's tests do: a valid paged_attention call gets the mask
    # the subject's own cache handed out for it (COURSE_MAP.md, "The mask"), no rewind(0), no append to a
    # released cache.
    course: bool = False


# The course's own geometry: every pool in its tests has pages of 4 tokens, and every chunk is [1, 2, L, 4]
# float32 (_random_chunk's 2 kv heads of head dim 4). An implementation the course accepts may refuse other
# page sizes (a power-of-two kernel), head counts or head dims its tests never use.
COURSE_PAGE_SIZE = 4
COURSE_HEAD_DIM = 4
COURSE_GEOMETRY = Geometry(page_sizes=(COURSE_PAGE_SIZE,), kv_heads=(2,), head_dim=COURSE_HEAD_DIM, course=True)
# The one query of more than one row the course's tests attend with: its prefill of 3 rows over a context of 6
# (3 appended, then 3 more); every other call decodes one token. Longer queries (9, 65) appear only in its
# rejection tests, which raise before any kernel runs. So an implementation the course accepts may have no
# long-prefill path, and may even align a causal mask wrongly wherever the context is not twice the query.
COURSE_PREFILL_ROWS = 3
COURSE_PREFILL_CONTEXT = 6
# The widest block table the course's tests attend over (its bfloat16 decode's 3 pages; its batch's 2): an
# implementation the course accepts may refuse wider ones, so course cases keep each request to 3 pages.
COURSE_MAX_PAGES = 3
# Every one-token update_and_fetch_paged of the course's tests extends a context (a decode step: its block-table
# test's tokens after 3, its bfloat16 decode after 64); it opens a cache through update_and_fetch_paged only with
# several tokens (3, 4, 5 or 17). An implementation the course accepts may refuse a decode on an empty cache, so course
# cases open a cache through update_and_fetch_paged with at least this many tokens.
COURSE_FIRST_PAGED_APPEND = 2
# The widest batch the course's tests attend over (its BatchingKvCache of 3 slots; every other call is one
# request): an implementation the course accepts may refuse more rows, so course cases batch 3 rows at most.
COURSE_MAX_BATCH = 3


def query_len(length: int, geometry: Geometry, context: int) -> int:
    """The query length a check attends with after appending `length` tokens, `context` in all: all of them beyond
    the course. In its course case one, but at the course's own prefill (the last COURSE_PREFILL_ROWS tokens of a
    context of COURSE_PREFILL_CONTEXT)."""
    if not geometry.course:
        return length
    at_the_courses_prefill = length >= COURSE_PREFILL_ROWS and context == COURSE_PREFILL_CONTEXT
    return COURSE_PREFILL_ROWS if at_the_courses_prefill else 1


def attends_alone(course: bool, rows: int, context: int) -> bool:
    """Whether a check attends over one request's own metadata after an append of `rows` query rows, `context` in
    all (float32): always beyond the course (`course` false); in its course case only at the course's own
    one-request float32 call, its prefill of COURSE_PREFILL_ROWS rows over COURSE_PREFILL_CONTEXT. The course decodes float32 only in its
    batch (its one-request decode is bfloat16), so an implementation it accepts may refuse a float32 decode of one
    request; such a course case checks the request's pages through the metadata alone."""
    return not course or (rows == COURSE_PREFILL_ROWS and context == COURSE_PREFILL_CONTEXT)


def split_at_the_course(
    course_test: str, wider: Geometry, *, per_page_size: bool = False, replay: bool = False
) -> pytest.MarkDecorator:
    """Parametrize a check over `geometry`: the course's own (COURSE_GEOMETRY), a course check of
    `course_test`, and `wider`, the same check beyond the course. With `per_page_size`, over `geometry,
    page_size` instead: the course's case at its page size, and one wider case per page size of `wider`. With
    `replay`, the course's case is also marked REPLAY_MARK (it replays the course's data point as its test
    builds and reads it)."""
    course, beyond = [pytest.mark.course(course_test)], pytest.mark.beyond_course
    if replay:
        course.append(getattr(pytest.mark, REPLAY_MARK))
    if not per_page_size:
        return pytest.mark.parametrize("geometry", [
            pytest.param(COURSE_GEOMETRY, marks=course, id="course"),
            pytest.param(wider, marks=beyond, id="wider"),
        ])
    return pytest.mark.parametrize("geometry, page_size", [
        pytest.param(COURSE_GEOMETRY, COURSE_PAGE_SIZE, marks=course, id=f"course-{COURSE_PAGE_SIZE}"),
        *(pytest.param(wider, size, marks=beyond, id=f"wider-{size}") for size in wider.page_sizes),
    ])

COURSE_MARK = "course"
# Whether the running check is a course clause (set by the plugin around each check): outputs are then compared
# under the course's tolerance (reference/tolerance.py COURSE_TOLERANCES).
IN_COURSE_CLAUSE: ContextVar[bool] = ContextVar("pagecheck_in_course_clause", default=False)
BEYOND_COURSE_MARK = "beyond_course"
# Beside COURSE_MARK on a check that replays one of the course's own data points as its test builds and reads it
# (through the subject's pool, the metadata's own mask, an unconverted query).
REPLAY_MARK = "replays_the_course"
SCOPE_PROPERTY = "scope"  # user_properties key: "course" or "beyond_course"
COURSE_PROPERTY = "course"  # user_properties key, once per mapped course test

INVALID_METADATA = f"{DAY_4}::test_paged_attention_rejects_invalid_live_metadata_before_dispatch"
# The case ids of INVALID_METADATA, each a rule of its own.
INVALID_METADATA_CASES = (
    "negative-context",
    "oversized-context",
    "insufficient-table-width",
    "negative-live-page",
    "page-id-equals-domain",
    "aliased-live-page",
    "invalid-padding-sentinel",
    "live-page-in-padding",
    "zero-page-size",
)

# The phrase each of the course's rejection tests matches in the ValueError's message (its pytest.raises(ValueError,
# match=...), a re.search): a course case that sends exactly the course's inputs demands the same.
COURSE_PHRASES: dict[str, str] = {
    **{f"{INVALID_METADATA}[{case}]": phrase for case, phrase in (
        ("negative-context", "nonnegative"), ("oversized-context", "not covered"),
        ("insufficient-table-width", "not covered"), ("negative-live-page", "outside physical page storage"),
        ("page-id-equals-domain", "outside physical page storage"), ("aliased-live-page", "aliased"),
        ("invalid-padding-sentinel", "must use the -1 sentinel"), ("live-page-in-padding", "must use the -1 sentinel"),
        ("zero-page-size", "positive integer"),
    )},
    f"{DAY_4}::test_paged_attention_rejects_active_context_shorter_than_query": "must be zero or at least query length",
    f"{DAY_3}::test_task_1_rejects_incompatible_dtype_before_allocating_a_page": "existing page storage dtype",
    f"{DAY_3}::test_task_1_rejects_shape_mismatch_without_mutating_cache": "same shape",
    f"{DAY_3}::test_task_2_mixed_pools_fail_before_any_batch_row_mutates": "share one page pool",
}

COURSE_TESTS: dict[str, str] = {
    f"{DAY_3}::test_task_1_paged_cache_matches_full_cache": "appends of 3, 2, 5 tokens: dense K/V, context, "
    "ceil(context / page_size) pages, full-size physical pages, page_lens sum to the context",
    f"{DAY_3}::test_task_1_paged_pool_reuses_freed_pages": "release frees every page; the next request reuses them "
    "without issuing new ones",
    f"{DAY_3}::test_task_1_rejects_incompatible_dtype_before_allocating_a_page": "an append in another dtype than "
    "the pool's storage raises ValueError and changes nothing",
    f"{DAY_3}::test_task_1_rejects_shape_mismatch_without_mutating_cache": "key and value of different shapes raise "
    "ValueError and change nothing",
    f"{DAY_3}::test_task_1_rolls_back_every_page_when_a_later_write_fails": "a failure injected into the second "
    "page write of one append leaves pool and cache as they were",
    f"{DAY_3}::test_task_2_mixed_pools_fail_before_any_batch_row_mutates": "BatchingKvCache with requests on two "
    "pools raises ValueError before any row changes",
    f"{DAY_3}::test_task_1_paged_pool_grows_storage_geometrically": "storage capacity doubles; growths, copied "
    "pages and bytes are counted; key_pages has one row per issued page",
    f"{DAY_3}::test_task_1_paged_pool_reset_removes_warmup_capacity_and_counters": "reset of an idle pool empties "
    "storage and counters",
    f"{DAY_3}::test_task_1_reuses_block_table_until_page_ids_change": "block_table() is reused while the page ids "
    "stay, and rebuilt when they change",
    f"{DAY_3}::test_task_1_materializes_page_storage_without_dense_gather": "materialize() evaluates the page "
    "storage without gathering dense K/V",
    f"{DAY_3}::test_task_1_paged_cache_rewind": "rewind(3) of [4, 4, 1]: dense K/V, offset, page_lens, pages "
    "freed to the pool",
    f"{DAY_4}::test_task_1_paged_attention_matches_dense_attention": "a causal prefill chunk over the cache's "
    "metadata matches dense attention; metadata table, context and pages",
    f"{DAY_4}::test_task_2_batched_paged_attention_matches_dense_attention": "BatchingKvCache decode metadata "
    "(an empty slot is a row of -1 with context 0) and attention per live row",
    f"{DAY_4}::test_paged_attention_preserves_bfloat16_for_decode": "bfloat16 decode at D=128 keeps bfloat16 and "
    "matches within 2e-2",
    **{f"{INVALID_METADATA}[{case}]": f"invalid metadata ({case}) raises ValueError before dispatch, at L = 1, 9, 65"
       for case in INVALID_METADATA_CASES},
    f"{DAY_4}::test_paged_attention_rejects_active_context_shorter_than_query": "a live context shorter than the "
    "query raises ValueError, at L = 2, 9, 65",
}

OUTSIDE_THE_API: dict[str, str] = {
    f"{DAY_3}::test_task_1_model_kv_caches_share_storage_within_each_layer": "the course's Qwen3 model",
    f"{DAY_3}::test_task_1_model_layer_caches_keep_independent_page_metadata": "the course's Qwen3 model",
    f"{DAY_3}::test_task_3_week3_model_reuses_week2_fast_kernels": "the course's Qwen3 model",
    f"{DAY_3}::test_task_3_incremental_decode_matches_week2": "the course's Qwen3 model",
    f"{DAY_4}::test_paged_attention_is_course_owned": "a source check of the course's own kernel call",
    f"{DAY_4}::test_task_3_incremental_decode_matches_week2_with_paged_attention": "the course's Qwen3 model",
    f"{DAY_4}::test_week3_custom_embedding_matches_readable_path": "the course's quantized embedding",
    f"{DAY_4}::test_week3_default_inherits_week2_prefill_kernels": "the course's Qwen3 model",
}


BOTH, BEYOND_ONLY = (COURSE_MARK, BEYOND_COURSE_MARK), (BEYOND_COURSE_MARK,)
# Invariant -> the scopes its checks carry: a grade scores an invariant's course checks and its checks beyond
# the course as two clauses (pagecheck.grading.rubric). tests/test_course_map.py holds this to the marks.
CLAUSE_SCOPES: dict[str, tuple[str, ...]] = {
    "context_len": BOTH,
    "block_table_order": BOTH,
    "alias_free": BOTH,
    "release_once": BOTH,
    "lazy_tail": BOTH,
    "rejection": BOTH,
    "gqa_mapping": BOTH,
    "head_dims": BEYOND_ONLY,
    "dtypes": BOTH,
    "page_sizes": BEYOND_ONLY,
    "page_boundaries": BEYOND_ONLY,
    "dispatch_paths": BEYOND_ONLY,
    "softmax_stability": BEYOND_ONLY,
    "empty_rows": BEYOND_ONLY,
    "inputs_unchanged": BEYOND_ONLY,
    "batch_consistency": BOTH,
    "batching_cache": BOTH,
    "page_storage": BOTH,
}

def course_scope(item: Any) -> list[tuple[str, str]]:
    """A collected check's relation to the course, as user_properties; ValueError unless it has exactly one."""
    course = list(item.iter_markers(COURSE_MARK))
    beyond = list(item.iter_markers(BEYOND_COURSE_MARK))
    if bool(course) == bool(beyond):
        raise ValueError(
            f"{item.nodeid} must carry either @pytest.mark.{COURSE_MARK}(<course test ids>) or "
            f"@pytest.mark.{BEYOND_COURSE_MARK}, not {'both' if course else 'neither'}"
        )
    if beyond:
        return [(SCOPE_PROPERTY, BEYOND_COURSE_MARK)]
    ids = sorted({i for mark in course for i in mark.args})
    unknown = [i for i in ids if i not in COURSE_TESTS]
    if not ids or unknown:
        raise ValueError(
            f"{item.nodeid}: @pytest.mark.{COURSE_MARK} needs ids from COURSE_TESTS in invariants/course.py, "
            f"got {unknown or 'none'}"
        )
    return [(SCOPE_PROPERTY, COURSE_MARK), *((COURSE_PROPERTY, i) for i in ids)]
