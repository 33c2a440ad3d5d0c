"""NumPy inputs to the impl API: arrays to paged_attention, integers to the pool, cache and batch methods.

paged_attention takes NumPy arrays as it takes MLX arrays: the same dtypes (float64 is refused with the message
an MLX float64 array gets), any byte order and any strides, and nested lists for the metadata when they are
rectangular. Page ids, slots, counts and slot ids are Python ints, the type the pool hands out; a NumPy integer
is named as the wrong type, not reported as an id the pool never issued.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import mlx.core as mx
import numpy as np
import pytest

from pagecheck.impl.attention import paged_attention
from pagecheck.impl.kv_cache import BatchingKvCache
from pagecheck.impl.page_pool import TinyKvPagedPool
from pagecheck.impl.paged_kv_cache import TinyKvPagedCache
from pagecheck.reference.layouts import random_layout
from tests.kv_chunks import cache_state, pool_state, random_chunk

FLOATS = ("query", "key_pages", "value_pages")
METADATA = ("block_table", "context_lens")


def numpy_inputs(mask: str | None = "causal") -> dict[str, Any]:
    """Two requests (contexts 6 and 3, L 2) over pages of 4, every array NumPy (float32, int32 metadata)."""
    layout = random_layout(
        np.random.default_rng(3), context_lens=[6, 3], page_size=4, num_queries=2,
        num_q_heads=4, num_kv_heads=2, head_dim=8, extra_columns=1,
    )
    inputs = {name: np.array(value) if isinstance(value, mx.array) else value for name, value in layout.as_mx().items()}
    inputs["mask"] = mask
    return inputs


def as_mlx(inputs: dict[str, Any]) -> dict[str, Any]:
    return {name: mx.array(value) if isinstance(value, np.ndarray) else value for name, value in inputs.items()}


def raised(call: Callable[[], Any]) -> BaseException:
    with pytest.raises(ValueError) as error:
        call()
    return error.value


@pytest.mark.parametrize(
    "dtype, mlx_dtype",
    [(np.float64, mx.float64), (np.int32, mx.int32), (np.bool_, mx.bool_), (np.complex64, mx.complex64)],
    ids=["float64", "int32", "bool", "complex64"],
)
def test_a_numpy_dtype_the_kernels_lack_gets_the_message_an_mlx_array_of_it_gets(dtype: Any, mlx_dtype: Any) -> None:
    """NumPy float64 was computed as float32 (MLX converts it so), returning float32 for a float64 query."""
    inputs = numpy_inputs()
    finite = {name: np.nan_to_num(inputs[name]) for name in FLOATS}  # NaN past the contexts has no int32 value
    as_numpy = {**inputs, **{name: finite[name].astype(dtype) for name in FLOATS}}
    as_mlx_arrays = {**as_mlx(inputs), **{name: mx.array(finite[name]).astype(mlx_dtype) for name in FLOATS}}
    mlx_error = raised(lambda: paged_attention(**as_mlx_arrays))
    assert str(mlx_error).startswith(f"pagecheck: query dtype {np.dtype(dtype).name} is not supported")
    assert str(raised(lambda: paged_attention(**as_numpy))) == str(mlx_error)


@pytest.mark.parametrize("dtype", [object, np.longdouble, str], ids=["object", "longdouble", "str"])
def test_a_numpy_dtype_mlx_has_no_array_of_is_a_value_error_naming_the_query(dtype: Any) -> None:
    """These raised RuntimeError std::bad_cast from the conversion to MLX."""
    inputs = numpy_inputs()
    inputs.update({name: inputs[name].astype(dtype) for name in FLOATS})
    name = inputs["query"].dtype.name
    with pytest.raises(ValueError, match=rf"pagecheck: query dtype {name} is not supported; use float32, bfloat16"):
        paged_attention(**inputs)


def test_numpy_float16_gives_float16_as_mlx_float16_does() -> None:
    inputs = numpy_inputs()
    inputs.update({name: inputs[name].astype(np.float16) for name in FLOATS})
    out, want = paged_attention(**inputs), paged_attention(**as_mlx(inputs))
    assert out.dtype == want.dtype == mx.float16
    assert np.array_equal(np.array(out), np.array(want))


def _swapped(array: np.ndarray) -> np.ndarray:
    return array.astype(array.dtype.newbyteorder(">" if np.little_endian else "<"))


def _reversed_strides(array: np.ndarray) -> np.ndarray:
    """The same values through negative strides: a reversed copy, viewed reversed."""
    flip = tuple(slice(None, None, -1) for _ in array.shape)
    return np.ascontiguousarray(array[flip])[flip]


LAYOUTS = {
    "non-native byte order": _swapped,
    "negative strides": _reversed_strides,
    "Fortran order": np.asfortranarray,
    "every other element": lambda array: np.repeat(array, 2, axis=-1)[..., ::2],
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("fields", [FLOATS, METADATA, FLOATS + METADATA], ids=["pools", "metadata", "all"])
def test_any_byte_order_and_strides_give_what_mlx_arrays_give(layout: str, fields: tuple[str, ...]) -> None:
    """Big-endian arrays raised RuntimeError std::bad_cast; negative strides MLX's DLPack error naming no field."""
    inputs = numpy_inputs()
    want = np.array(paged_attention(**as_mlx(inputs)))
    changed = {**inputs, **{name: LAYOUTS[layout](inputs[name]) for name in fields}}
    for name in fields:
        assert np.array_equal(changed[name], inputs[name], equal_nan=True)  # pages hold NaN past the contexts
    out = paged_attention(**changed)
    assert out.dtype == mx.float32 and np.array_equal(np.array(out), want)


@pytest.mark.parametrize("field, ragged", [("block_table", [[0, 1, -1], [2]]), ("context_lens", [[6], [3, 0]])])
def test_ragged_metadata_lists_are_a_value_error_naming_the_field(field: str, ragged: list[Any]) -> None:
    """They raised NumPy's 'inhomogeneous shape' ValueError, naming no field."""
    inputs = numpy_inputs()
    with pytest.raises(ValueError, match=rf"{field}=\[\[.*\]\] is not a rectangular array of integers \(.*inhomog"):
        paged_attention(**{**inputs, field: ragged})
    with pytest.raises(NotImplementedError, match="sliding"):  # the contract's first rule still comes first
        paged_attention(**{**inputs, field: ragged, "mask": "sliding"})
    rectangular = {**inputs, **{name: inputs[name].tolist() for name in METADATA}}
    assert np.array_equal(np.array(paged_attention(**rectangular)), np.array(paged_attention(**inputs)))


def test_a_numpy_axis_longer_than_mlx_arrays_hold_is_a_value_error_naming_the_field() -> None:
    """An empty NumPy pool may have 2**31 + 5 pages (of D 0); the conversion raised MLX's OverflowError."""
    inputs = numpy_inputs()
    query = np.zeros((*inputs["query"].shape[:3], 0), np.float32)
    pages = np.empty((2**31 + 5, 2, 4, 0), np.float32)
    with pytest.raises(ValueError, match=r"key_pages shape=\(2147483653, 2, 4, 0\) has an axis longer than 2147483647"):
        paged_attention(**{**inputs, "query": query, "key_pages": pages, "value_pages": pages})


# -- NumPy integers as ids, slots and counts ------------------------------------------------------------------


def _setup() -> tuple[TinyKvPagedPool, TinyKvPagedCache, BatchingKvCache]:
    """A pool with a cache of 6 tokens (2 pages of 4) in slot 0 of a batch of 2, and a free page 2."""
    pool = TinyKvPagedPool(page_size=4)
    cache = TinyKvPagedCache(pool)
    cache.append(*random_chunk(np.random.default_rng(0), 6))
    pool.free_page(pool.allocate_page())
    batch = BatchingKvCache(2)
    batch.add_request(cache, 0)
    return pool, cache, batch


def _token() -> mx.array:
    return mx.zeros((1, 2, 1, 4))


NUMPY_INTEGER_CALLS: dict[str, tuple[Callable[..., Any], str]] = {
    "free_page": (lambda pool, cache, batch: pool.free_page(np.int64(0)), "page_id=np.int64(0) must be a Python int"),
    "read_page": (lambda pool, cache, batch: pool.read_page(np.int64(0)), "page_id=np.int64(0) must be a Python int"),
    "write_page_slice id": (lambda pool, cache, batch: pool.write_page_slice(np.int64(1), 2, _token(), _token()),
                            "page_id=np.int64(1) must be a Python int"),
    "write_page_slice start": (lambda pool, cache, batch: pool.write_page_slice(1, np.int32(2), _token(), _token()),
                               r"start=np.int32\(2\) is outside .* \(it must be a Python int; got numpy.int32\)"),
    "write_token_rows": (lambda pool, cache, batch: pool.write_token_rows([np.int64(1)], [2], _token(), _token()),
                         "page_id=np.int64(1) must be a Python int"),
    "rewind": (lambda pool, cache, batch: cache.rewind(np.int64(1)), "rewind n=np.int64(1) must be an int"),
    "claim_token_slots": (lambda pool, cache, batch: cache.claim_token_slots(np.int64(1)),
                          "count=np.int64(1) must be an int >= 0"),
    "append mask_length": (lambda pool, cache, batch: cache.append(_token(), _token(), np.int64(1)),
                           "mask_length=np.int64(1) must be None or the chunk length S=1"),
    "batch request": (lambda pool, cache, batch: batch.request(np.int64(0)), "id=np.int64(0) must be a slot"),
    "batch remove_request": (lambda pool, cache, batch: batch.remove_request(np.int64(0)),
                             "id=np.int64(0) must be a slot"),
    "batch add_request": (lambda pool, cache, batch: batch.add_request(TinyKvPagedCache(pool), np.int64(1)),
                          "id=np.int64(1) must be a slot"),
    "pool page_size": (lambda pool, cache, batch: TinyKvPagedPool(np.int64(4)), "page_size=np.int64(4) must be"),
    "batch max_active_requests": (lambda pool, cache, batch: BatchingKvCache(np.int64(2)),
                                  "max_active_requests=np.int64(2) must be"),
}


@pytest.mark.parametrize("name", sorted(NUMPY_INTEGER_CALLS))
def test_a_numpy_integer_is_named_as_the_wrong_type_and_changes_nothing(name: str) -> None:
    """free_page(np.int64(0)) said page 0 'was never issued by this pool', and slot ids in range were reported
    out of range: each message now names the value and says it must be a Python int."""
    call, message = NUMPY_INTEGER_CALLS[name]
    pool, cache, batch = _setup()
    before = (pool_state(pool), cache_state(cache), batch.active_request_ids)
    with pytest.raises(ValueError, match=message if name == "write_page_slice start" else re.escape(message)) as error:
        call(pool, cache, batch)
    assert "numpy.int" in str(error.value) and "Python int" in str(error.value)
    assert "never issued" not in str(error.value)
    assert (pool_state(pool), cache_state(cache), batch.active_request_ids) == before


def test_the_pool_hands_out_python_int_ids_that_every_method_takes() -> None:
    pool, cache, batch = _setup()
    assert all(type(page_id) is int for page_id in cache.page_ids)
    page_id = pool.allocate_page()
    assert type(page_id) is int and pool.is_live(page_id)
    pool.write_page_slice(page_id, 0, _token(), _token())
    assert pool.read_page(page_id)[0].shape == (1, 2, 4, 4)
    pool.free_page(page_id)
    assert batch.request(0) is cache
