"""TinyKvPagedPool: id reuse, geometric growth, NaN-poisoned storage, and validation without side effects."""

from __future__ import annotations

from typing import Any, Callable

import mlx.core as mx
import numpy as np
import pytest

from pagecheck.impl.page_pool import TinyKvPagedPool
from pagecheck.reference.arrays import to_numpy
from tests.kv_chunks import pool_state, random_chunk

PAGE_SIZE = 4
HEADS = 2
HEAD_DIM = 4


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(7)


def _pool_of_written_pages(rng: np.random.Generator, num_pages: int) -> TinyKvPagedPool:
    """A pool with `num_pages` live pages, one token written at slot 0 of each."""
    pool = TinyKvPagedPool(page_size=PAGE_SIZE)
    key, value = random_chunk(rng, 1)
    for _ in range(num_pages):
        pool.write_page_slice(pool.allocate_page(), 0, key, value)
    return pool


def _bytes_per_page(dtype: mx.Dtype = mx.float32) -> int:
    return HEADS * PAGE_SIZE * HEAD_DIM * dtype.size


def test_fresh_ids_count_up_and_freed_ids_come_back_last_in_first_out() -> None:
    pool = TinyKvPagedPool(page_size=PAGE_SIZE)
    assert [pool.allocate_page() for _ in range(4)] == [0, 1, 2, 3]
    pool.free_page(0)
    pool.free_page(2)
    assert pool.free_page_ids == [0, 2]
    assert pool.used_page_ids == [1, 3]
    assert pool.allocate_page() == 2
    assert pool.allocate_page() == 0
    assert pool.allocate_page() == 4
    assert pool.reused_page_allocations == 2
    assert (pool.num_pages, pool.num_free_pages) == (5, 0)


def test_freeing_a_free_page_names_it_and_changes_nothing() -> None:
    pool = TinyKvPagedPool(page_size=PAGE_SIZE)
    pool.allocate_page()
    pool.allocate_page()
    pool.free_page(1)
    before = pool_state(pool)
    with pytest.raises(ValueError) as error:
        pool.free_page(1)
    assert str(error.value) == "Page 1 is already free"
    assert pool_state(pool) == before


@pytest.mark.parametrize("page_id", [2, -1, True, "0", 1.0, None])
def test_freeing_an_id_never_issued_is_rejected(page_id: Any) -> None:
    pool = TinyKvPagedPool(page_size=PAGE_SIZE)
    pool.allocate_page()
    pool.allocate_page()
    before = pool_state(pool)
    with pytest.raises(ValueError, match="page_id"):
        pool.free_page(page_id)
    assert pool_state(pool) == before


@pytest.mark.parametrize("page_size", [0, -4, 2.0, True, None])
def test_page_size_must_be_a_positive_int(page_size: Any) -> None:
    with pytest.raises(ValueError, match=r"page_size=.* must be a positive integer"):
        TinyKvPagedPool(page_size=page_size)


def test_storage_is_created_by_the_first_write_and_grows_geometrically(rng: np.random.Generator) -> None:
    pool = TinyKvPagedPool(page_size=PAGE_SIZE)
    assert (pool.capacity, pool.key_pages, pool.value_pages, pool.storage_nbytes) == (0, None, None, 0)
    key, value = random_chunk(rng, 1)
    capacities = []
    for _ in range(17):
        page_id = pool.allocate_page()
        pool.write_page_slice(page_id, 0, key, value)
        capacities.append(pool.capacity)
    assert capacities == [4] * 4 + [8] * 4 + [16] * 8 + [32]
    assert pool.storage_growths == 4
    assert pool.copied_pages_on_growth == 4 + 8 + 16
    assert pool.copied_bytes_on_growth == (4 + 8 + 16) * 2 * _bytes_per_page()
    assert pool.storage_nbytes == 32 * 2 * _bytes_per_page()
    assert pool.key_pages.shape == (17, HEADS, PAGE_SIZE, HEAD_DIM)
    assert pool.value_pages.shape == (17, HEADS, PAGE_SIZE, HEAD_DIM)


def test_first_write_after_many_allocations_sizes_storage_for_every_issued_page(
    rng: np.random.Generator,
) -> None:
    pool = TinyKvPagedPool(page_size=PAGE_SIZE)
    for _ in range(6):
        pool.allocate_page()
    pool.write_page_slice(5, 0, *random_chunk(rng, 2))
    assert (pool.capacity, pool.storage_growths, pool.copied_pages_on_growth) == (6, 1, 0)
    pool.allocate_page()
    assert (pool.capacity, pool.storage_growths, pool.copied_pages_on_growth) == (12, 2, 6)


def test_reused_ids_do_not_grow_storage(rng: np.random.Generator) -> None:
    pool = _pool_of_written_pages(rng, 4)
    for page_id in range(4):
        pool.free_page(page_id)
    for _ in range(4):
        pool.allocate_page()
    assert (pool.capacity, pool.storage_growths, pool.num_pages) == (4, 1, 4)


def test_an_unheld_page_is_the_next_free_one_else_a_row_past_the_issued_pages(rng: np.random.Generator) -> None:
    pool = TinyKvPagedPool(page_size=PAGE_SIZE)
    assert pool.unheld_page() is None  # no storage yet
    pool = _pool_of_written_pages(rng, 3)
    assert (pool.capacity, pool.unheld_page()) == (4, 3)  # the storage row past the 3 issued pages
    pool.write_page_slice(pool.allocate_page(), 0, *random_chunk(rng, 1))
    assert (pool.capacity, pool.num_free_pages, pool.unheld_page()) == (4, 0, None)  # every row held
    pool.free_page(1)
    pool.free_page(2)
    assert pool.unheld_page() == 2 == pool.allocate_page()  # the free page handed out next
    assert pool.unheld_page() == 1 and pool.is_live(2) and not pool.is_live(1)


def test_unwritten_slots_are_nan_and_written_ones_survive_growth(rng: np.random.Generator) -> None:
    pool = TinyKvPagedPool(page_size=PAGE_SIZE)
    key, value = random_chunk(rng, 2)
    first = pool.allocate_page()
    pool.write_page_slice(first, 1, key, value)
    for _ in range(4):  # the fifth page grows storage from 4 to 8 rows
        pool.allocate_page()
    assert pool.capacity == 8
    page_keys, page_values = (to_numpy(x) for x in pool.read_page(first))
    assert page_keys.shape == page_values.shape == (1, HEADS, PAGE_SIZE, HEAD_DIM)
    np.testing.assert_array_equal(page_keys[:, :, 1:3], to_numpy(key))
    np.testing.assert_array_equal(page_values[:, :, 1:3], to_numpy(value))
    assert np.isnan(page_keys[:, :, [0, 3]]).all() and np.isnan(page_values[:, :, [0, 3]]).all()
    pool.write_page_slice(4, 0, key, value)
    assert np.isnan(to_numpy(pool.read_page(4)[0])[:, :, 2:]).all()
    assert np.isnan(to_numpy(pool.key_pages)[1:4]).all()


@pytest.mark.parametrize("dtype", [mx.float32, mx.bfloat16, mx.float16])
def test_a_write_touches_only_its_slots(rng: np.random.Generator, dtype: mx.Dtype) -> None:
    pool = TinyKvPagedPool(page_size=PAGE_SIZE)
    ids = [pool.allocate_page() for _ in range(3)]
    first_key, first_value = random_chunk(rng, PAGE_SIZE, dtype=dtype)
    for page_id in ids:
        pool.write_page_slice(page_id, 0, first_key, first_value)
    key, value = random_chunk(rng, 2, dtype=dtype)
    pool.write_page_slice(ids[1], 1, key, value)
    keys = to_numpy(pool.key_pages)
    expected = np.repeat(to_numpy(first_key), 3, axis=0)
    expected[1, :, 1:3] = to_numpy(key)[0]
    np.testing.assert_array_equal(keys, expected)
    assert pool.dtype == dtype
    assert pool.storage_nbytes == pool.capacity * 2 * _bytes_per_page(dtype)


def _chunk(length: int = 1, *, heads: int = HEADS, dim: int = HEAD_DIM, dtype: mx.Dtype = mx.float32) -> mx.array:
    return mx.zeros((1, heads, length, dim), dtype=dtype)


# (name, write arguments given a pool with live page 0 and free page 1, field the message names)
INVALID_WRITES: list[tuple[str, Callable[[], tuple[Any, ...]], str]] = [
    ("key not an array", lambda: (0, 0, np.zeros((1, HEADS, 1, HEAD_DIM)), _chunk()), "key"),
    ("value not an array", lambda: (0, 0, _chunk(), [[0.0]]), "value"),
    ("key 3-D", lambda: (0, 0, mx.zeros((HEADS, 1, HEAD_DIM)), mx.zeros((HEADS, 1, HEAD_DIM))), "key shape"),
    ("batch of two", lambda: (0, 0, mx.zeros((2, HEADS, 1, HEAD_DIM)), mx.zeros((2, HEADS, 1, HEAD_DIM))), "key shape"),
    ("value shape differs", lambda: (0, 0, _chunk(2), _chunk(1)), "same shape"),
    ("no tokens", lambda: (0, 0, _chunk(0), _chunk(0)), "S=0"),
    ("no heads", lambda: (0, 0, _chunk(heads=0), _chunk(heads=0)), "H_kv"),
    ("int32 key", lambda: (0, 0, _chunk(dtype=mx.int32), _chunk(dtype=mx.int32)), "key dtype"),
    ("value dtype differs", lambda: (0, 0, _chunk(), _chunk(dtype=mx.float16)), "value dtype"),
    ("negative start", lambda: (0, -1, _chunk(), _chunk()), "start"),
    ("start at page end", lambda: (0, PAGE_SIZE, _chunk(), _chunk()), "start"),
    ("bool start", lambda: (0, True, _chunk(), _chunk()), "start"),
    ("past page end", lambda: (0, PAGE_SIZE - 1, _chunk(2), _chunk(2)), "runs past"),
    ("longer than a page", lambda: (0, 0, _chunk(PAGE_SIZE + 1), _chunk(PAGE_SIZE + 1)), "runs past"),
    ("free page", lambda: (1, 0, _chunk(), _chunk()), "page_id=1 is free"),
    ("never issued", lambda: (2, 0, _chunk(), _chunk()), "page_id=2"),
    ("heads differ from storage", lambda: (0, 0, _chunk(heads=3), _chunk(heads=3)), "H_kv=2"),
    ("head dim differs from storage", lambda: (0, 0, _chunk(dim=8), _chunk(dim=8)), "D=4"),
    ("dtype differs from storage", lambda: (0, 0, _chunk(dtype=mx.bfloat16), _chunk(dtype=mx.bfloat16)),
     "existing page storage dtype"),
]


@pytest.mark.parametrize("make_args, field", [case[1:] for case in INVALID_WRITES], ids=[c[0] for c in INVALID_WRITES])
def test_invalid_write_names_the_field_and_changes_nothing(
    rng: np.random.Generator, make_args: Callable[[], tuple[Any, ...]], field: str
) -> None:
    pool = TinyKvPagedPool(page_size=PAGE_SIZE)
    pool.allocate_page()
    pool.allocate_page()
    pool.write_page_slice(0, 0, *random_chunk(rng, 2))
    pool.free_page(1)
    before = pool_state(pool)
    with pytest.raises(ValueError, match=field):
        pool.write_page_slice(*make_args())
    assert pool_state(pool) == before


def test_a_rejected_first_write_creates_no_storage() -> None:
    pool = TinyKvPagedPool(page_size=PAGE_SIZE)
    pool.allocate_page()
    before = pool_state(pool)
    with pytest.raises(ValueError, match="runs past"):
        pool.write_page_slice(0, 3, _chunk(2), _chunk(2))
    assert pool_state(pool) == before
    assert pool.key_pages is None


def test_first_storage_beyond_mlxs_memory_limit_is_refused_before_any_array_is_made() -> None:
    """MLX ends the process when an allocation fails; K and V of 4 pages of 2**30 slots (8 heads of 128 floats)
    are 32 TiB, beyond any machine's limit, so the pool refuses them and stays empty."""
    pool = TinyKvPagedPool(page_size=2**30)
    pool.allocate_page()
    before = pool_state(pool)
    chunk = mx.ones((1, 8, 1, 128))
    with pytest.raises(ValueError, match=r"page_size=1073741824: .* above MLX's memory limit"):
        pool.write_page_slice(0, 0, chunk, chunk)
    assert pool_state(pool) == before and pool.key_pages is None


def test_growth_beyond_mlxs_memory_limit_is_refused_and_changes_nothing(rng: np.random.Generator) -> None:
    """Growth holds the old rows and the new storage at once: with the limit just above the old rows' bytes,
    the fifth page's growth (to 8 rows) is refused, and the pool keeps its 4 pages, contents and counters."""
    pool = _pool_of_written_pages(rng, 4)
    before = pool_state(pool)
    previous = mx.set_memory_limit(pool.storage_nbytes + 2 * _bytes_per_page())
    try:
        with pytest.raises(ValueError, match=r"old rows being copied.*memory limit"):
            pool.allocate_page()
    finally:
        mx.set_memory_limit(previous)
    assert pool_state(pool) == before
    assert pool.allocate_page() == 4 and pool.capacity == 8


def test_reading_needs_a_live_written_page(rng: np.random.Generator) -> None:
    pool = TinyKvPagedPool(page_size=PAGE_SIZE)
    pool.allocate_page()
    with pytest.raises(ValueError, match="page_id=0 has no storage"):
        pool.read_page(0)
    pool.write_page_slice(0, 0, *random_chunk(rng, 1))
    pool.allocate_page()
    pool.free_page(1)
    with pytest.raises(ValueError, match="page_id=1 is free"):
        pool.read_page(1)
    with pytest.raises(ValueError, match="page_id=5"):
        pool.read_page(5)


def test_reset_refuses_live_pages_then_forgets_everything(rng: np.random.Generator) -> None:
    pool = _pool_of_written_pages(rng, 5)
    for page_id in range(4):
        pool.free_page(page_id)
    pool.allocate_page()
    before = pool_state(pool)
    with pytest.raises(ValueError, match=r"pages \[3, 4\] are still live"):
        pool.reset()
    assert pool_state(pool) == before
    pool.free_page(3)
    pool.free_page(4)
    pool.reset()
    assert pool_state(pool) == (0, 0, (), (), 0, 0, 0, 0, 0, None, None)
    assert pool.allocate_page() == 0


def test_rollback_restores_ids_counters_storage_and_contents(rng: np.random.Generator) -> None:
    pool = _pool_of_written_pages(rng, 4)
    pool.free_page(2)
    key, value = random_chunk(rng, 1)
    before = pool_state(pool)
    checkpoint = pool.checkpoint()
    pool.write_page_slice(pool.allocate_page(), 1, key, value)  # reuses page 2
    pool.write_page_slice(pool.allocate_page(), 0, key, value)  # grows storage to 8 rows
    pool.free_page(0)
    assert pool_state(pool) != before
    pool.rollback(checkpoint)
    assert pool_state(pool) == before


def test_a_checkpoint_shares_the_free_pages_and_a_rollback_restores_their_order() -> None:
    # Every layer's append takes a checkpoint at every decode step: it keeps the free pages as they are (no copy
    # of a list that grows with freed pages), and a rollback puts back the same ids, order and liveness.
    pool = TinyKvPagedPool(page_size=PAGE_SIZE)
    ids = [pool.allocate_page() for _ in range(50)]
    for page_id in ids[:40:3]:
        pool.free_page(page_id)
    free_before, live_before = pool.free_page_ids, [pool.is_live(i) for i in ids]
    checkpoint = pool.checkpoint()
    assert checkpoint.free_pages is pool.checkpoint().free_pages  # shared, not copied
    taken = [pool.allocate_page() for _ in range(5)]
    assert taken == free_before[::-1][:5]
    pool.free_page(ids[1])
    pool.rollback(checkpoint)
    assert pool.free_page_ids == free_before and pool.num_free_pages == len(free_before)
    assert [pool.is_live(i) for i in ids] == live_before
    assert [pool.allocate_page() for _ in range(len(free_before))] == free_before[::-1]
    assert pool.num_free_pages == 0 and pool.allocate_page() == len(ids)


def test_a_write_built_elsewhere_goes_through_token_rows_index_and_replace_storage(rng) -> None:
    # serving's compiled step: the pool checks the positions and gives the index, the caller writes
    # the rows, and the pool takes the written storage.
    from pagecheck.impl import page_write

    pool = _pool_of_written_pages(rng, 2)
    rows, _ = random_chunk(rng, 1)
    before = pool_state(pool)
    with pytest.raises(ValueError, match="name one position twice"):
        pool.token_rows_index([0, 0], [1, 1], (2, HEADS, 1, HEAD_DIM), mx.float32, mx.float32)
    with pytest.raises(ValueError, match="is free"):
        freed = pool.allocate_page()
        pool.free_page(freed)
        pool.token_rows_index([freed], [0], (1, HEADS, 1, HEAD_DIM), mx.float32, mx.float32)
    with pytest.raises(ValueError, match="does not match the existing page storage"):
        pool.token_rows_index([1], [0], (1, HEADS + 1, 1, HEAD_DIM), mx.float32, mx.float32)
    # The checks alone refuse the same inputs, and pass what the index is built for.
    with pytest.raises(ValueError, match="name one position twice"):
        pool.check_token_rows([0, 0], [1, 1], (2, HEADS, 1, HEAD_DIM), mx.float32, mx.float32)
    with pytest.raises(ValueError, match="is free"):
        pool.check_token_rows([freed], [0], (1, HEADS, 1, HEAD_DIM), mx.float32, mx.float32)
    assert pool.check_token_rows([1], [2], (1, HEADS, 1, HEAD_DIM), mx.float32, mx.float32) is None
    index = pool.token_rows_index([1], [2], (1, HEADS, 1, HEAD_DIM), mx.float32, mx.float32)
    keys, values = pool.storage
    with pytest.raises(ValueError, match="must match the storage it replaces"):
        pool.replace_storage(keys[:1], values[:1])
    pool.replace_storage(page_write.write_token_rows(keys, index, rows), page_write.write_token_rows(values, index, rows))
    written_key, _ = pool.read_page(1)
    assert np.array_equal(to_numpy(written_key)[0, :, 2], to_numpy(rows)[0, :, 0])
    assert pool_state(pool)[0] == before[0] + 1  # the page allocated and freed above is the only new one


def test_replace_storage_needs_storage() -> None:
    pool = TinyKvPagedPool(page_size=PAGE_SIZE)
    with pytest.raises(ValueError, match="no page storage to replace"):
        pool.replace_storage(mx.zeros((4, HEADS, PAGE_SIZE, HEAD_DIM)), mx.zeros((4, HEADS, PAGE_SIZE, HEAD_DIM)))


BAD_TOKEN_POSITIONS = [
    ("page id a list", [[0]], [1], r"page_id=\[0\] must be a Python int, .* got list"),
    ("page ids None", None, [1], r"page_ids=None must be a list or tuple, got NoneType"),
    ("slots None", [0], None, r"slots=None must be a list or tuple, got NoneType"),
    ("slot a list", [0], [[1]], r"start=\[1\] is outside a page of size 4 \(it must be a Python int; got list\)"),
    ("page ids a NumPy array", np.array([0]), [1],
     r"page_ids=array\(\[0\]\) must be a list or tuple, got numpy.ndarray"),
    ("page ids a string", "0", [1], r"page_ids='0' must be a list or tuple, got str"),
]


@pytest.mark.parametrize("page_ids, slots, message", [case[1:] for case in BAD_TOKEN_POSITIONS],
                         ids=[case[0] for case in BAD_TOKEN_POSITIONS])
def test_token_writes_need_lists_of_python_ints(
    rng: np.random.Generator, page_ids: Any, slots: Any, message: str
) -> None:
    """[[0]] raised TypeError (unhashable list), None TypeError (no len()); each is a ValueError naming it."""
    pool = _pool_of_written_pages(rng, 2)
    keys = mx.zeros((1, HEADS, 1, HEAD_DIM))
    before = pool_state(pool)
    with pytest.raises(ValueError, match=message):
        pool.write_token_rows(page_ids, slots, keys, keys)
    with pytest.raises(ValueError, match=message):
        pool.check_token_rows(page_ids, slots, (1, HEADS, 1, HEAD_DIM), mx.float32, mx.float32)
    assert pool_state(pool) == before


def test_rollback_needs_a_pool_checkpoint(rng: np.random.Generator) -> None:
    """None raised AttributeError; a cache's checkpoint (not the pool's) too."""
    from pagecheck.impl.paged_kv_cache import TinyKvPagedCache

    pool = _pool_of_written_pages(rng, 2)
    before = pool_state(pool)
    for wrong in (None, TinyKvPagedCache(pool).checkpoint(), "checkpoint"):
        with pytest.raises(ValueError, match=r"checkpoint=.* must be a PoolCheckpoint from checkpoint\(\), got"):
            pool.rollback(wrong)
        assert pool_state(pool) == before


@pytest.mark.parametrize("call, message", [
    (lambda pool: pool.check_room_for(None),
     r"pages=None must be an int >= 0 \(it must be a Python int; got NoneType\)"),
    (lambda pool: pool.check_room_for(1.5), r"pages=1.5 must be an int >= 0"),
    (lambda pool: pool.check_room_for(-1), r"pages=-1 must be an int >= 0"),
    (lambda pool: pool.check_live_pages(None, "slot 0"), r"page_ids=None of slot 0 must be a list or tuple"),
    (lambda pool: pool.check_live_pages([[1]], "slot 0"), r"slot 0 holds page_id=\[1\], which is not a page id"),
    (lambda pool: pool.check_chunk_shape(None, mx.float32, mx.float32), r"key shape=None must be \[1, H_kv, S, D\]"),
], ids=["room None", "room float", "room negative", "live pages None", "live page a list", "chunk shape None"])
def test_the_pools_other_checks_name_a_malformed_argument(
    rng: np.random.Generator, call: Callable[[TinyKvPagedPool], None], message: str
) -> None:
    """Each raised TypeError (None - int, iterating None, hashing a list, len(None)) or, for 1.5 and -1 pages,
    passed."""
    pool = _pool_of_written_pages(rng, 2)
    before = pool_state(pool)
    with pytest.raises(ValueError, match=message):
        call(pool)
    assert pool_state(pool) == before
