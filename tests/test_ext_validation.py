"""The C++ ops check their own inputs: bad metadata raises and never crashes the process.

Called directly through `ext`, bypassing the Python checks. Shapes and dtypes
raise ValueError at the call. On the CPU stream, block-table and context
values raise ValueError at the call too, whether the arrays are computed or
still lazy (lazy ones are evaluated first), before any K/V memory is read.
Under mx.compile the values are tracers: they are checked when the task runs
and raise RuntimeError (MLX's wrapper for errors inside a task) at
evaluation. All of it holds on MLX's CUDA build too (35 of 35 on the H200,
once error messages stopped going through iostreams: ext/src/common/error_text.h).

Every call here names the CPU stream: these checks are about the CPU path.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import numpy as np
import pytest

from pagecheck import ext


def paged_args() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    return {
        "query": mx.array(rng.standard_normal((1, 4, 1, 8)).astype(np.float32)),
        "key_pages": mx.array(rng.standard_normal((3, 2, 4, 8)).astype(np.float32)),
        "value_pages": mx.array(rng.standard_normal((3, 2, 4, 8)).astype(np.float32)),
        "block_table": mx.array([[2, 0, -1]], dtype=mx.int32),
        "context_lens": mx.array([6], dtype=mx.int32),
        "page_size": 4,
        "stream": mx.cpu,
    }


def call(args: dict[str, Any]) -> np.ndarray:
    return np.array(ext.paged_attention(**args))


# The op's own messages name the field and value and carry the course's phrase, like reference/validation.py's.
BAD_VALUES = {
    "page id past the pool": ("block_table", [[2, 3, -1]], r"block_table\[0, 1\] = 3 is outside physical page storage"),
    "huge page id": ("block_table", [[2, 2**31 - 1, -1]], r"block_table\[0, 1\] = 2147483647 is outside physical"),
    "negative live page id": ("block_table", [[-1, 0, -1]], r"block_table\[0, 0\] = -1 is outside physical"),
    "padding not -1": ("block_table", [[2, 0, 1]], r"block_table\[0, 2\] = 1 .*must use the -1 sentinel"),
    "negative context": ("context_lens", [-5], r"context_lens\[0\] = -5 must be nonnegative"),
    "context past the table": ("context_lens", [13], r"context_lens\[0\] = 13 is not covered by block_table"),
}


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_bad_ready_metadata_raises_value_error_at_call(case: str) -> None:
    field, value, message = BAD_VALUES[case]
    args = paged_args()
    args[field] = mx.array(value, dtype=mx.int32)
    with pytest.raises(ValueError, match=message):
        ext.paged_attention(**args)


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_bad_lazy_metadata_raises_value_error_at_call(case: str) -> None:
    field, value, message = BAD_VALUES[case]
    args = paged_args()
    args[field] = mx.add(mx.array(value, dtype=mx.int32), 0, stream=mx.cpu)  # not computed yet
    with pytest.raises(ValueError, match=message):
        ext.paged_attention(**args)


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_bad_traced_metadata_raises_at_eval_without_crashing(case: str) -> None:
    field, value, message = BAD_VALUES[case]
    args = paged_args()
    names = ("query", "key_pages", "value_pages", "block_table", "context_lens")
    arrays = [args[name] for name in names]
    arrays[names.index(field)] = mx.array(value, dtype=mx.int32)

    def attend(*inputs: mx.array) -> mx.array:
        return ext.paged_attention(*inputs, page_size=args["page_size"], stream=mx.cpu)

    with pytest.raises(RuntimeError, match=message):
        mx.eval(mx.compile(attend)(*arrays))
    # The process and MLX's CPU stream keep working after the failed task.
    assert np.isfinite(call(paged_args())).all()


def test_context_shorter_than_query_is_rejected() -> None:
    args = paged_args()
    args["query"] = mx.zeros((1, 4, 3, 8))
    args["context_lens"] = mx.array([2], dtype=mx.int32)
    args["block_table"] = mx.array([[2, -1, -1]], dtype=mx.int32)
    with pytest.raises(ValueError, match=r"context_lens\[0\] = 2 must be zero or at least query length L = 3"):
        ext.paged_attention(**args)


BAD_SHAPES = {
    "integer query": ("query", lambda a: a["query"].astype(mx.int32), r"query dtype"),
    "3-d query": ("query", lambda a: a["query"][0], r"query must have 4 dimensions"),
    "value dtype differs": ("value_pages", lambda a: a["value_pages"].astype(mx.float16), r"value_pages dtype"),
    "value shape differs": ("value_pages", lambda a: a["value_pages"][:2], r"value_pages shape"),
    "int64 block table": ("block_table", lambda a: a["block_table"].astype(mx.int64), r"block_table must be int32"),
    "1-d block table": ("block_table", lambda a: a["block_table"][0], r"block_table must have 2 dimensions"),
    "context batch differs": ("context_lens", lambda a: mx.array([6, 6], dtype=mx.int32), r"context_lens.shape\[0\] = 2"),
    "H_q not a multiple of H_kv": ("query", lambda a: a["query"][:, :3], r"H_q = 3 is not a multiple of H_kv = 2"),
    "head dim differs": ("query", lambda a: a["query"][..., :4], r"key_pages.shape\[3\] = 8"),
    "page size differs": ("page_size", lambda a: 2, r"key_pages.shape\[2\] = 4 must equal page_size = 2"),
    "page size zero": ("page_size", lambda a: 0, r"page_size = 0"),
    "scale not finite": ("scale", lambda a: float("nan"), r"scale = nan"),
}


@pytest.mark.parametrize("case", sorted(BAD_SHAPES))
def test_bad_shape_or_dtype_raises_value_error(case: str) -> None:
    field, make, message = BAD_SHAPES[case]
    args = paged_args()
    args[field] = make(args)
    with pytest.raises(ValueError, match=message):
        ext.paged_attention(**args)


def test_dense_op_rejects_context_past_key_length() -> None:
    query, key = mx.zeros((1, 2, 1, 8)), mx.zeros((1, 1, 5, 8))
    with pytest.raises(ValueError, match=r"context_lens\[0\] = 6 is not covered by key length S = 5"):
        ext.dense_attention(query, key, key, None, False, mx.array([6], dtype=mx.int32), stream=mx.cpu)


def test_dense_op_rejects_lazy_context_past_key_length() -> None:
    query, key = mx.zeros((1, 2, 1, 8)), mx.zeros((1, 1, 5, 8))
    lazy = mx.add(mx.array([6], dtype=mx.int32), 0, stream=mx.cpu)  # not computed yet
    with pytest.raises(ValueError, match=r"context_lens\[0\] = 6 is not covered by key length S = 5"):
        ext.dense_attention(query, key, key, None, False, lazy, stream=mx.cpu)


def test_dense_op_rejects_keys_shorter_than_queries() -> None:
    query, key = mx.zeros((1, 2, 4, 8)), mx.zeros((1, 1, 3, 8))
    with pytest.raises(ValueError, match=r"must be zero or at least query length L = 4"):
        ext.dense_attention(query, key, key, None, True, stream=mx.cpu)


def test_strided_metadata_is_read_through_a_contiguous_copy() -> None:
    # Every other column of a wider table: not row contiguous, so the call reads a contiguous copy.
    args = paged_args()
    wide = mx.array([[2, 7, 0, 7, -1, 7]], dtype=mx.int32)[:, ::2]
    assert np.array_equal(np.array(wide), np.array(args["block_table"]))
    expected = call(args)
    args["block_table"] = wide
    np.testing.assert_array_equal(call(args), expected)
    args["block_table"] = mx.array([[2, 7, 3, 7, -1, 7]], dtype=mx.int32)[:, ::2]
    with pytest.raises(ValueError, match=r"block_table\[0, 1\] = 3"):
        ext.paged_attention(**args)
