"""impl.paged_attention rejects every malformed input with a ValueError naming the field and value, in the
course's words where the course's tests match a phrase."""

from __future__ import annotations

from typing import Any, Callable

import mlx.core as mx
import numpy as np
import pytest

from pagecheck.impl.attention import paged_attention
from pagecheck.reference.layouts import random_layout


def valid_inputs() -> dict[str, Any]:
    """Two requests (contexts 6 and 3, L 2) over pages of 4; the table is [[a, b, -1], [c, -1, -1]]."""
    layout = random_layout(
        np.random.default_rng(0), context_lens=[6, 3], page_size=4, num_queries=2,
        num_q_heads=4, num_kv_heads=2, head_dim=8, extra_columns=1,
    )
    return layout.as_mx()


def with_table_entry(row: int, col: int, value: int) -> Callable[[dict[str, Any]], None]:
    def edit(inputs: dict[str, Any]) -> None:
        table = np.array(inputs["block_table"])
        table[row, col] = value
        inputs["block_table"] = mx.array(table)

    return edit


def with_context(row: int, value: int) -> Callable[[dict[str, Any]], None]:
    def edit(inputs: dict[str, Any]) -> None:
        lens = np.array(inputs["context_lens"])
        lens[row] = value
        inputs["context_lens"] = mx.array(lens)

    return edit


def with_value(field: str, make: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], None]:
    def edit(inputs: dict[str, Any]) -> None:
        inputs[field] = make(inputs)

    return edit


def aliased(inputs: dict[str, Any]) -> None:
    table = np.array(inputs["block_table"])
    table[1, 0] = table[0, 0]
    inputs["block_table"] = mx.array(table)


BAD_INPUTS = {
    "negative context": (with_context(1, -1), r"context_lens\[1\]=-1 must be nonnegative"),
    "context not covered by the table": (with_context(0, 13), r"context_lens\[0\]=13 is not covered"),
    "live page id below zero": (with_table_entry(0, 1, -2), r"block_table\[0, 1\]=-2 is outside physical page storage"),
    "live page id past the pool": (with_table_entry(1, 0, 99), r"block_table\[1, 0\]=99 is outside physical page storage"),
    "padding entry that is not -1": (with_table_entry(0, 2, 0), r"block_table\[0, 2\]=0 .* must use the -1 sentinel"),
    "live page used twice": (aliased, r"block_table\[1, 0\]=\d+ is aliased"),
    "context shorter than the query": (with_context(1, 1), r"context_lens\[1\]=1 must be zero or at least query length"),
    "page size zero": (with_value("page_size", lambda i: 0), r"page_size=0 must be a positive integer"),
    "page size negative": (with_value("page_size", lambda i: -4), r"page_size=-4 must be a positive integer"),
    "page size differs from the page axis": (with_value("page_size", lambda i: 2), r"page_size=2"),
    "query dtype differs": (with_value("query", lambda i: i["query"].astype(mx.float16)), r"dtypes differ"),
    "value dtype differs": (with_value("value_pages", lambda i: i["value_pages"].astype(mx.bfloat16)), r"dtypes differ"),
    "H_q not a multiple of H_kv": (with_value("query", lambda i: i["query"][:, :3]), r"H_q=3"),
    "query not 4-d": (with_value("query", lambda i: i["query"][0]), r"query shape"),
    "value pages shape differs": (with_value("value_pages", lambda i: i["value_pages"][:-1]), r"value_pages shape"),
    "head dim differs": (with_value("query", lambda i: i["query"][..., :4]), r"head dim"),
    "block table batch differs": (with_value("block_table", lambda i: i["block_table"][:1]), r"block_table shape"),
    "context_lens batch differs": (with_value("context_lens", lambda i: i["context_lens"][:1]), r"context_lens shape"),
    "float block table": (with_value("block_table", lambda i: i["block_table"].astype(mx.float32)), r"block_table dtype"),
    "page size None": (with_value("page_size", lambda i: None), r"page_size=None must be a positive integer"),
    "page size True": (with_value("page_size", lambda i: True), r"page_size=True must be a positive integer"),
    "page size a float": (with_value("page_size", lambda i: 4.0), r"page_size=4.0 must be a positive integer"),
    "key pages None": (with_value("key_pages", lambda i: None), r"key_pages=None must be an array"),
    "query a list": (with_value("query", lambda i: [1.0, 2.0]), r"query=\[1.0, 2.0\] must be an array"),
    "value pages None": (with_value("value_pages", lambda i: None), r"value_pages=None must be an array"),
}


def test_valid_inputs_are_accepted() -> None:
    assert paged_attention(**valid_inputs()).shape == (2, 4, 2, 8)


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_raises_value_error_naming_field(case: str) -> None:
    edit, message = BAD_INPUTS[case]
    inputs = valid_inputs()
    edit(inputs)
    with pytest.raises(ValueError, match=message):
        paged_attention(**inputs)


def test_numpy_arrays_give_what_mlx_arrays_give() -> None:
    inputs = valid_inputs()
    as_numpy = {name: np.array(value) if isinstance(value, mx.array) else value for name, value in inputs.items()}
    assert np.array_equal(np.array(paged_attention(**as_numpy)), np.array(paged_attention(**inputs)))


@pytest.mark.parametrize("mask", ["sliding", "full"])
def test_unsupported_mask_raises_not_implemented(mask: str) -> None:
    inputs = valid_inputs()
    inputs["mask"] = mask
    with pytest.raises(NotImplementedError, match=mask):
        paged_attention(**inputs)


def test_rejected_call_leaves_inputs_unchanged() -> None:
    inputs = valid_inputs()
    with_table_entry(1, 0, 99)(inputs)
    before = {name: np.array(value) for name, value in inputs.items() if isinstance(value, mx.array)}
    with pytest.raises(ValueError):
        paged_attention(**inputs)
    for name, value in before.items():
        np.testing.assert_array_equal(np.array(inputs[name]), value)
