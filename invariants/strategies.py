"""Hypothesis strategies for paged layouts and cache workloads.

Strategies draw parameters and a seed; reference.layouts.random_layout turns
them into pages (shuffled, non-contiguous, free pages in between, NaN in every
slot no request owns). Options are keyword-only and checked when the strategy
is built, so a bad option fails at collection rather than mid-search.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from pagecheck.reference.layouts import DTYPES, PagedLayout, random_layout

SMALL_PAGE_SIZES = (1, 2, 3, 4, 8, 16)
HEAD_DIMS = (32, 64, 128)
MAX_GROUP = 8  # largest H_q / H_kv the contract covers


def seeds() -> SearchStrategy[int]:
    return st.integers(min_value=0, max_value=2**32 - 1)


def _check_choices(name: str, choices: Sequence[object], allowed: Sequence[object] | None = None) -> None:
    if len(choices) == 0:
        raise ValueError(f"{name}={choices!r} must offer at least one choice")
    if allowed is not None:
        bad = [c for c in choices if c not in allowed]
        if bad:
            raise ValueError(f"{name} has {bad!r}, not in {tuple(allowed)}")


def _check_positive(name: str, value: int) -> None:
    if not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def context_lengths(
    *, page_size: int, max_pages: int, min_len: int = 1, allow_empty: bool = False
) -> SearchStrategy[int]:
    """Context lengths up to max_pages pages, half of them within one token of a page boundary."""
    _check_positive("page_size", page_size)
    _check_positive("max_pages", max_pages)
    _check_positive("min_len", min_len)
    top = max(max_pages * page_size, min_len)
    near_boundary = st.builds(
        lambda k, delta: k * page_size + delta,
        st.integers(min_value=1, max_value=max_pages),
        st.sampled_from((-1, 0, 1)),
    ).map(lambda n: min(max(n, min_len), top))
    anywhere = st.integers(min_value=min_len, max_value=top)
    lengths = st.one_of(near_boundary, anywhere)
    return st.one_of(st.just(0), lengths) if allow_empty else lengths


def paged_layouts(
    *,
    page_sizes: Sequence[int] = SMALL_PAGE_SIZES,
    max_batch: int = 3,
    max_pages: int = 4,
    num_queries: Sequence[int] = (1,),
    masks: Sequence[str | None] = (None,),
    dtypes: Sequence[str] = ("float32",),
    head_dims: Sequence[int] = (32,),
    max_group: int = 4,
    kv_heads: Sequence[int] = (1, 2),
    allow_empty_rows: bool = False,
    complete_pages: bool = False,
    logit_scale: float = 1.0,
) -> SearchStrategy[PagedLayout]:
    """Whole layouts: batch, contexts (dependent on the page size), heads, dtype, then random_layout.

    A query length above 1 is only drawn with mask "causal" (a prefill
    chunk); with mask None it is a decode step, L = 1. `complete_pages`
    makes every context a whole number of pages (no partly filled tail).
    """
    _check_choices("page_sizes", page_sizes)
    for p in page_sizes:
        _check_positive("page_sizes entry", p)
    _check_positive("max_batch", max_batch)
    _check_positive("max_pages", max_pages)
    _check_choices("num_queries", num_queries)
    for n in num_queries:
        _check_positive("num_queries entry", n)
    _check_choices("masks", masks, (None, "causal"))
    if any(n > 1 for n in num_queries) and "causal" not in masks:
        raise ValueError(f"num_queries={tuple(num_queries)} above 1 needs mask 'causal' among masks={tuple(masks)}")
    _check_choices("dtypes", dtypes, DTYPES)
    _check_choices("head_dims", head_dims)
    if not 1 <= max_group <= MAX_GROUP:
        raise ValueError(f"max_group={max_group!r} must be in [1, {MAX_GROUP}]")
    _check_choices("kv_heads", kv_heads)
    if complete_pages and allow_empty_rows:
        raise ValueError("complete_pages and allow_empty_rows exclude each other")
    if not logit_scale > 0:
        raise ValueError(f"logit_scale={logit_scale!r} must be positive")
    return _paged_layouts(
        tuple(page_sizes), max_batch, max_pages, tuple(num_queries), tuple(masks), tuple(dtypes),
        tuple(head_dims), max_group, tuple(kv_heads), allow_empty_rows, complete_pages, logit_scale,
    )


@st.composite
def _paged_layouts(
    draw: st.DrawFn,
    page_sizes: tuple[int, ...],
    max_batch: int,
    max_pages: int,
    num_queries: tuple[int, ...],
    masks: tuple[str | None, ...],
    dtypes: tuple[str, ...],
    head_dims: tuple[int, ...],
    max_group: int,
    kv_heads: tuple[int, ...],
    allow_empty_rows: bool,
    complete_pages: bool,
    logit_scale: float,
) -> PagedLayout:
    page_size = draw(st.sampled_from(page_sizes))
    mask = draw(st.sampled_from(masks))
    length = draw(st.sampled_from(num_queries)) if mask == "causal" else 1
    batch = draw(st.integers(min_value=1, max_value=max_batch))
    if complete_pages:
        lengths = st.integers(min_value=-(-length // page_size), max_value=max(max_pages, 1)).map(lambda k: k * page_size)
    else:
        lengths = context_lengths(page_size=page_size, max_pages=max_pages, min_len=length, allow_empty=allow_empty_rows)
    contexts = draw(st.lists(lengths, min_size=batch, max_size=batch))
    num_kv_heads = draw(st.sampled_from(kv_heads))
    group = draw(st.integers(min_value=1, max_value=max_group))
    return random_layout(
        np.random.default_rng(draw(seeds())),
        context_lens=contexts,
        page_size=page_size,
        num_queries=length,
        num_q_heads=num_kv_heads * group,
        num_kv_heads=num_kv_heads,
        head_dim=draw(st.sampled_from(head_dims)),
        dtype=draw(st.sampled_from(dtypes)),
        mask=mask,
        # At least one page and one table column even when every row is empty: a zero-sized
        # pool or table is no state a serving loop reaches.
        spare_pages=draw(st.integers(min_value=1, max_value=3)),
        extra_columns=draw(st.integers(min_value=0 if any(contexts) else 1, max_value=2)),
        logit_scale=logit_scale,
    )


def chunk_plans(
    *, page_size: int, max_chunks: int = 3, max_decode: int = 6, max_total: int | None = None, min_first: int = 1
) -> SearchStrategy[list[int]]:
    """Token counts to append, prefill chunks first, then one-token decode steps.

    Each prefill chunk, given where the previous one ended, either ends on a
    page boundary, crosses one by a token, or has any length up to three pages.
    The first chunk holds at least `min_first` tokens. With `max_total`, the
    plan writes at most that many tokens (chunks are cut short and the plan
    ends there).
    """
    _check_positive("page_size", page_size)
    _check_positive("max_chunks", max_chunks)
    _check_positive("min_first", min_first)
    if max_total is not None:
        _check_positive("max_total", max_total)
        if max_total < min_first:
            raise ValueError(f"max_total={max_total} leaves no room for a first chunk of min_first={min_first}")
    if not isinstance(max_decode, int) or max_decode < 0:
        raise ValueError(f"max_decode must be a non-negative int, got {max_decode!r}")
    return _chunk_plans(page_size, max_chunks, max_decode, max_total, min_first)


@st.composite
def _chunk_plans(
    draw: st.DrawFn, page_size: int, max_chunks: int, max_decode: int, max_total: int | None, min_first: int
) -> list[int]:
    plan: list[int] = []
    written = 0
    most = max_total if max_total is not None else float("inf")
    for _ in range(draw(st.integers(min_value=1, max_value=max_chunks))):
        if written >= most:
            break
        room = page_size - written % page_size  # tokens until the tail page is full
        length = draw(
            st.one_of(
                st.just(room),
                st.just(room + 1),
                st.integers(min_value=1, max_value=3 * page_size),
            )
        )
        if not plan:
            length = max(length, min_first)
        length = int(min(length, most - written))
        plan.append(length)
        written += length
    decodes = draw(st.integers(min_value=0, max_value=max_decode))
    plan.extend([1] * int(min(decodes, most - written)))
    return plan
