"""impl.paged_attention checks a block table and context-length pair once, and every new or changed one again."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import mlx.core as mx
import numpy as np
import pytest

from pagecheck import ext
import pagecheck.impl.validated_inputs as validated_inputs
from pagecheck.impl.attention import paged_attention
from pagecheck.reference.layouts import random_layout


@pytest.fixture(autouse=True)
def empty_memo() -> Iterator[None]:
    ext.forget_validated_metadata()
    yield
    ext.forget_validated_metadata()


@pytest.fixture
def full_checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the calls that run the full check (reference/validation.py)."""
    calls: list[int] = []
    check = validated_inputs.check_paged_inputs

    def counting(*args: Any, **kwargs: Any) -> None:
        calls.append(1)
        check(*args, **kwargs)

    monkeypatch.setattr(validated_inputs, "check_paged_inputs", counting)
    return calls


def valid_inputs(seed: int = 0) -> dict[str, Any]:
    layout = random_layout(
        np.random.default_rng(seed), context_lens=[6, 3], page_size=4, num_queries=2,
        num_q_heads=4, num_kv_heads=2, head_dim=8, extra_columns=1,
    )
    return layout.as_mx()


def test_same_metadata_is_checked_once(full_checks: list[int]) -> None:
    inputs = valid_inputs()
    first = paged_attention(**inputs)
    second = paged_attention(**inputs)
    assert len(full_checks) == 1
    np.testing.assert_array_equal(np.array(first), np.array(second))


def test_equal_values_in_a_new_array_are_checked_again(full_checks: list[int]) -> None:
    inputs = valid_inputs()
    paged_attention(**inputs)
    inputs["block_table"] = mx.array(np.array(inputs["block_table"]))
    paged_attention(**inputs)
    assert len(full_checks) == 2


def test_entry_written_after_a_valid_call_is_rejected() -> None:
    inputs = valid_inputs()
    paged_attention(**inputs)
    inputs["block_table"][1, 0] = 99  # a new descriptor for the same Python object
    with pytest.raises(ValueError, match=r"block_table\[1, 0\]=99"):
        paged_attention(**inputs)


def test_context_grown_in_place_after_a_valid_call_is_rejected() -> None:
    inputs = valid_inputs()
    paged_attention(**inputs)
    inputs["context_lens"] += 7
    with pytest.raises(ValueError, match=r"context_lens\[0\]=13"):
        paged_attention(**inputs)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda inputs: {"page_size": 2}, r"page_size=2"),
        (lambda inputs: {"query": inputs["query"][:, :3]}, r"H_q=3"),
        (lambda inputs: {"query": inputs["query"].astype(mx.float16)}, r"dtypes differ"),
        (lambda inputs: {"value_pages": inputs["value_pages"][:-1]}, r"value_pages shape"),
        (lambda inputs: {"key_pages": inputs["key_pages"][:2], "value_pages": inputs["value_pages"][:2]},
         r"is outside physical page storage: page ids are \[0, 2\)"),
    ],
)
def test_remembered_metadata_with_other_inputs_is_checked_again(change: Any, message: str) -> None:
    inputs = valid_inputs()
    paged_attention(**inputs)
    with pytest.raises(ValueError, match=message):
        paged_attention(**{**inputs, **change(inputs)})


def test_a_longer_query_over_remembered_metadata_is_checked_again() -> None:
    inputs = valid_inputs()
    paged_attention(**inputs)
    longer = mx.concatenate([inputs["query"]] * 2, axis=2)  # L 4 > context 3 of row 1
    with pytest.raises(ValueError, match=r"context_lens\[1\]=3"):
        paged_attention(**{**inputs, "query": longer})


def test_unsupported_mask_raises_after_a_remembered_call() -> None:
    inputs = valid_inputs()
    paged_attention(**inputs)
    with pytest.raises(NotImplementedError, match="sliding"):
        paged_attention(**{**inputs, "mask": "sliding"})


def test_rejected_metadata_is_never_remembered(full_checks: list[int]) -> None:
    inputs = valid_inputs()
    inputs["block_table"][1, 0] = 99
    for _ in range(2):
        with pytest.raises(ValueError, match=r"block_table\[1, 0\]=99"):
            paged_attention(**inputs)
    assert len(full_checks) == 2
    assert ext.validated_metadata_entries() == 0


def test_non_mlx_metadata_is_checked_every_call(full_checks: list[int]) -> None:
    inputs = valid_inputs()
    inputs["block_table"] = np.array(inputs["block_table"])
    paged_attention(**inputs)
    paged_attention(**inputs)
    assert len(full_checks) == 2


def test_memo_keeps_the_most_recent_pairs_only() -> None:
    capacity = ext_entries()
    layouts = [valid_inputs(seed) for seed in range(capacity + 3)]
    for inputs in layouts:
        paged_attention(**inputs)
    assert ext.validated_metadata_entries() == capacity
    newest, oldest = layouts[-1], layouts[0]
    assert ext.paged_inputs_validated(newest["query"], newest["key_pages"], newest["value_pages"],
                                      newest["block_table"], newest["context_lens"], newest["page_size"], False)
    assert not ext.paged_inputs_validated(oldest["query"], oldest["key_pages"], oldest["value_pages"],
                                          oldest["block_table"], oldest["context_lens"], oldest["page_size"], False)


def ext_entries() -> int:
    """The memo's capacity (kValidatedMetadataEntries), found by filling it."""
    inputs = valid_inputs()
    for _ in range(100):
        ext.remember_valid_paged_inputs(inputs["query"], inputs["key_pages"], inputs["value_pages"],
                                        mx.array(np.array(inputs["block_table"])), inputs["context_lens"],
                                        inputs["page_size"], False)
    capacity = ext.validated_metadata_entries()
    ext.forget_validated_metadata()
    return capacity


def test_metadata_of_another_integer_type_is_checked_once_and_converted(full_checks: list[int]) -> None:
    inputs = valid_inputs()
    expected = np.array(paged_attention(**inputs))
    inputs["block_table"] = inputs["block_table"].astype(mx.int64)
    first = paged_attention(**inputs)
    second = paged_attention(**inputs)
    assert len(full_checks) == 2  # the int32 table once, the int64 table once
    np.testing.assert_array_equal(np.array(first), expected)
    np.testing.assert_array_equal(np.array(second), expected)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"page_size": True}, id="page_size a bool"),
        pytest.param({"page_size": 4.0}, id="page_size a float"),
        pytest.param({"page_size": 2**31 + 4}, id="page_size past int32"),
        pytest.param({"mask": "Causal"}, id="mask another spelling"),
        pytest.param({"scale": "0.5"}, id="scale a string"),
    ],
)
def test_the_one_call_lookup_declines_what_it_cannot_answer_for(change: dict[str, Any]) -> None:
    """Arguments the memo cannot stand for go to the full check, remembered metadata or not."""
    inputs = valid_inputs()
    paged_attention(**inputs)
    paged_attention(**{**inputs, "mask": "causal"})
    assert ext.validated_paged_attention(**inputs) is not None
    assert ext.validated_paged_attention(**{**inputs, "mask": "causal"}) is not None
    assert ext.validated_paged_attention(**{**inputs, **change}) is None


def test_the_one_call_lookup_answers_with_the_ops_result() -> None:
    inputs = valid_inputs()
    assert ext.validated_paged_attention(**inputs) is None  # not remembered yet
    expected = np.array(paged_attention(**inputs, scale=0.5))
    for scale in (0.5, None, 1, np.float32(0.5), np.float64(0.5)):
        remembered = ext.validated_paged_attention(**inputs, scale=scale)
        assert remembered is not None
        direct = ext.paged_attention(inputs["query"], inputs["key_pages"], inputs["value_pages"],
                                     inputs["block_table"], inputs["context_lens"], inputs["page_size"], scale)
        np.testing.assert_array_equal(np.array(remembered), np.array(direct))
    np.testing.assert_array_equal(np.array(ext.validated_paged_attention(**inputs, scale=0.5)), expected)
    assert ext.validated_paged_attention(**{**inputs, "key_pages": np.array(inputs["key_pages"])}) is None


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"page_size": True}, ValueError, r"page_size"),
        ({"mask": "Causal"}, NotImplementedError, r"Causal"),
    ],
)
def test_declined_arguments_still_get_the_full_checks_error(change: dict[str, Any], error: type, message: str) -> None:
    inputs = valid_inputs()
    paged_attention(**inputs)
    with pytest.raises(error, match=message):
        paged_attention(**{**inputs, **change})


def test_a_numpy_scale_does_not_bring_the_full_check_back(full_checks: list[int]) -> None:
    inputs = valid_inputs()
    for _ in range(3):
        paged_attention(**inputs, scale=np.float32(0.5))
        paged_attention(**inputs, scale=1 / np.sqrt(8))
    assert len(full_checks) == 1


def test_an_array_mask_is_refused_by_name_not_by_the_arrays_comparison() -> None:
    inputs = valid_inputs()
    for _ in range(2):  # before and after the metadata is remembered
        with pytest.raises(NotImplementedError, match=r"mask=an array of shape \(1, 1, 2, 6\) is not supported"):
            paged_attention(**{**inputs, "mask": mx.zeros((1, 1, 2, 6))})
        paged_attention(**inputs)
