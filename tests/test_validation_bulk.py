"""The NumPy bulk check accepts exactly the metadata that the rule loop of check_paged_inputs accepts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pagecheck.reference import validation
from pagecheck.reference.validation import check_paged_inputs, metadata_valid_in_bulk


@st.composite
def metadata(draw: st.DrawFn) -> dict:
    """Block tables and context lengths that are valid, or broken in one of the ways the rules name.

    Pages are mapped for every length drawn, bad lengths included, so a bad length is the
    only thing wrong with its row unless an entry is broken too."""
    batch = draw(st.integers(1, 5))
    columns = draw(st.integers(0, 6))
    page_size = draw(st.integers(1, 4))
    num_queries = draw(st.integers(1, 3))
    num_pages = draw(st.integers(1, 14))
    valid_len = st.integers(0, columns * page_size).map(lambda n: n if n >= num_queries else 0)
    bad_len = st.sampled_from([-1, 1, num_queries - 1, columns * page_size + 1])
    lens = np.array([draw(st.one_of(valid_len, valid_len, bad_len)) for _ in range(batch)], dtype=np.int32)
    live = np.clip(-(-np.maximum(lens, 0) // page_size), 0, columns)
    table = np.full((batch, columns), -1, dtype=np.int32)
    free = list(draw(st.permutations(range(num_pages))))
    for b in range(batch):
        for col in range(int(live[b])):
            table[b, col] = free.pop() if free else draw(st.integers(0, num_pages - 1))  # may alias
    if table.size and draw(st.booleans()):
        b, col = draw(st.integers(0, batch - 1)), draw(st.integers(0, columns - 1))
        table[b, col] = draw(st.sampled_from([-2, -1, num_pages, num_pages + 5, 0, num_pages - 1]))
    return dict(table=table, lens=lens, page_size=page_size, num_queries=num_queries, num_pages=num_pages)


def loop_accepts(case: dict) -> bool:
    batch = case["table"].shape[0]
    query = np.zeros((batch, 2, case["num_queries"], 4), dtype=np.float32)
    pages = np.zeros((case["num_pages"], 1, case["page_size"], 4), dtype=np.float32)
    try:
        check_paged_inputs(query, pages, pages, case["table"], case["lens"], case["page_size"])
    except ValueError:
        return False
    return True


@settings(max_examples=400, deadline=None)
@given(metadata())
def test_bulk_check_agrees_with_the_rule_loop(case: dict) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(validation, "BULK_CHECK_MIN_ENTRIES", 10**9)  # the loop alone
        expected = loop_accepts(case)
    got = metadata_valid_in_bulk(case["table"], case["lens"], case["num_queries"], case["page_size"],
                                 case["num_pages"])
    assert got == expected, case


def test_large_tables_still_name_the_bad_entry() -> None:
    # Past the bulk threshold, a rejection still comes from the loop, with its message.
    table = np.arange(64 * 4, dtype=np.int32).reshape(64, 4)
    table[40, 2] = table[3, 1]
    lens = np.full(64, 4 * 16, dtype=np.int32)
    pages = np.zeros((256, 1, 16, 4), dtype=np.float32)
    with pytest.raises(ValueError, match=r"block_table\[40, 2\]=13 is aliased: row 3 uses it too"):
        check_paged_inputs(np.zeros((64, 2, 1, 4), dtype=np.float32), pages, pages, table, lens, 16)


def test_sparse_ids_in_a_huge_pool_take_the_sorting_path() -> None:
    # More page ids than a per-call flag array should hold: duplicates are found by sorting.
    table = np.array([[5, 2**30], [7, 2**30]], dtype=np.int32)
    lens = np.array([2, 2], dtype=np.int32)
    assert not metadata_valid_in_bulk(table, lens, 1, 1, 2**31 - 1)
    table[1, 1] = 2**30 + 1
    assert metadata_valid_in_bulk(table, lens, 1, 1, 2**31 - 1)
