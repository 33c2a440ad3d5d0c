"""Calling a subject the way a serving loop would, and reading back what it returns.

Subjects may return NumPy or MLX arrays; everything read back becomes NumPy
through reference.arrays.to_numpy. A query sent alongside a cache's metadata
takes the dtype (and array library) of the pages that cache handed out, so a
kernel always sees one dtype across its inputs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any, Callable, Mapping

import numpy as np

from pagecheck.invariants import injection
from pagecheck.invariants.course import COURSE_HEAD_DIM, COURSE_PAGE_SIZE
from pagecheck.reference.arrays import to_numpy
from pagecheck.reference.cache import PagedKvMetadata
from pagecheck.reference.layouts import PagedLayout

PagedAttention = Callable[..., Any]


# paged_attention's leading arguments, in the order the course passes them (positionally).
ATTENTION_ARGUMENTS = ("query", "key_pages", "value_pages", "block_table", "context_lens", "page_size")


def call_attention(paged_attention: PagedAttention, inputs: Mapping[str, Any], scale: float | None = None) -> Any:
    """paged_attention called as the course's tests call it: ATTENTION_ARGUMENTS positionally, `mask` by keyword,
    and `scale` only when a check sets one (the course never passes it, so a subject may do without it)."""
    options: dict[str, Any] = {"mask": inputs.get("mask")}
    if scale is not None:
        options["scale"] = scale
    return paged_attention(*(inputs[name] for name in ATTENTION_ARGUMENTS), **options)


# attention_output's `mask` when the subject gets the layout's own mask.
LAYOUT_MASK = object()


def attention_output(
    paged_attention: PagedAttention, layout: PagedLayout, scale: float | None = None, mask: Any = LAYOUT_MASK
) -> np.ndarray:
    """The subject's output for a layout, as float64; with `mask`, the subject gets that mask instead of the
    layout's (the oracle keeps the layout's)."""
    inputs = layout.as_mx()
    if mask is not LAYOUT_MASK:
        inputs["mask"] = mask
    return to_numpy(call_attention(paged_attention, inputs, scale), np.float64)


def like_pages(values: np.ndarray, pages: Any) -> Any:
    """`values` as the same kind of array, in the same dtype, as `pages`."""
    if isinstance(pages, np.ndarray):
        return values.astype(pages.dtype)
    import mlx.core as mx

    return mx.array(values.astype(np.float32)).astype(pages.dtype)


METADATA_FIELDS = ("key_pages", "value_pages", "block_table", "context_lens", "page_size", "mask")


METADATA_ARRAYS = METADATA_FIELDS[:4]  # mx.array in the course's PagedKvMetadata
METADATA_PAGES = METADATA_FIELDS[:2]


class MetadataRead(SimpleNamespace):
    """A metadata's fields read once (read_once). `handed`: the objects the subject handed out for a table or
    lengths that were no arrays, by field name, which its attention gets in their place (_over_metadata);
    `listed`: what their own .tolist() gave, which the course's asserts compare with lists (course_tolist)."""

    __slots__ = ("handed", "listed")


def read_once(metadata: Any) -> MetadataRead:
    """A subject's metadata with each field read once, here: the subject's attention, the oracle and every check
    then see the same objects (a property answering each read differently could show the attention one set of
    pages and the check another). A field the metadata lacks stays absent, so reading it fails as it would have.
    The pages must be arrays (MLX, as the course's PagedKvMetadata types them, or NumPy): any other object could
    answer a check's reading of it one way and the attention another. A table or lengths that are no arrays are
    read once into arrays for the checks and the oracle (read_table), while the subject's attention gets the
    object handed out, as the course hands it (`handed`): the course reads only their .tolist() and .shape, so a
    table of the subject's own that has those is one it accepts, and an attention that reads such a table of its
    own otherwise than its .tolist() says is judged on what it computes from it, as in the course (its output is
    compared with the oracle over the table the check read)."""
    fields, handed, listed = {}, {}, {}
    for name in METADATA_FIELDS:
        try:
            fields[name] = getattr(metadata, name)
        except AttributeError:
            continue
        if name in METADATA_PAGES:
            _require_array(f"metadata.{name}", fields[name])
        elif name in METADATA_ARRAYS:
            read, rows = _read_table(f"metadata.{name}", fields[name])
            if read is not fields[name]:
                handed[name] = fields[name]
            if rows is not NOT_LISTED:
                listed[name] = rows
            fields[name] = read
    seen = MetadataRead(**fields)
    seen.handed, seen.listed = handed, listed
    return seen


def course_tolist(seen: MetadataRead, name: str) -> Any:
    """A metadata's table or lengths as the course's asserts read them, through their own .tolist(): an array's,
    and for one that is no array what read_once read of it (AttributeError where it has none, as in the course).
    Compare it as the course does, with equals_list: rows that are tuples, say, are not the course's lists."""
    if name in seen.listed:
        return seen.listed[name]
    return getattr(seen, name).tolist() if name not in seen.handed else seen.handed[name].tolist()


NOT_LISTED = object()  # _read_table's rows of an object without .tolist()


def read_table(what: str, value: Any) -> Any:
    """A block table or context lengths as an array: an array (MLX or NumPy) or None as it is; any other object
    (a list, a table class of the subject's own) read once, through its .tolist() where it has one (as the course
    reads it), as an MLX int32 array. TypeError naming `what` where those values are no array of integers."""
    return _read_table(what, value)[0]


def _read_table(what: str, value: Any) -> tuple[Any, Any]:
    """read_table's array, and what the object's .tolist() gave (NOT_LISTED for an array, None or an object
    without one)."""
    import mlx.core as mx

    if value is None or isinstance(value, (mx.array, np.ndarray)):
        return value, NOT_LISTED
    listed = callable(getattr(value, "tolist", None))
    rows = value.tolist() if listed else value
    try:
        numbers = np.asarray(rows)
        # Whole floats are the ints they equal, as the course's == [[0, 1]] takes them.
        whole = numbers.dtype.kind == "f" and bool(np.all(np.isfinite(numbers) & (numbers == np.round(numbers))))
        if numbers.dtype.kind not in "iu" and numbers.size and not whole:
            raise TypeError(f"its values are {numbers.dtype}")
        limits = np.iinfo(np.int32)
        if numbers.size and not limits.min <= int(numbers.min()) <= int(numbers.max()) <= limits.max:
            raise OverflowError(f"its values {int(numbers.min())}..{int(numbers.max())} pass int32")
        return mx.array(numbers.astype(np.int32)), rows if listed else NOT_LISTED
    except (TypeError, ValueError, OverflowError) as exc:
        raise TypeError(f"{what} is a {type(value).__name__} whose values are no array of integers ({exc})") from None


def _require_array(what: str, value: Any) -> Any:
    """`value` when it is an array (MLX or NumPy) or None; TypeError naming `what` for any other object."""
    import mlx.core as mx

    if value is not None and not isinstance(value, (mx.array, np.ndarray)):
        raise TypeError(f"{what} is a {type(value).__name__}, not an array (mlx.core.array, as the course's "
                        "PagedKvMetadata and pool have it)")  # fmt: skip
    return value


def metadata_layout(query: np.ndarray, metadata: Any, dtype: str, mask: str | None, page_size: int) -> PagedLayout:
    """What a cache's metadata says, as a PagedLayout: for the oracle and for failure messages. Its page size is
    `page_size`, the one the check built its pool with: the course hands metadata.page_size only to the subject's
    own paged_attention (which may read None, say, as "the pages' slot axis"), never reads it."""
    return PagedLayout(
        query=query,
        key_pages=to_numpy(metadata.key_pages, np.float32),
        value_pages=to_numpy(metadata.value_pages, np.float32),
        block_table=to_numpy(metadata.block_table).astype(np.int32),
        context_lens=to_numpy(metadata.context_lens).astype(np.int32),
        page_size=page_size,
        dtype=dtype,
        mask=mask,
    )


def attention_over_metadata(
    paged_attention: PagedAttention, query: np.ndarray, metadata: Any, mask: str | None, own_mask: bool = False
) -> np.ndarray:
    """Run the subject's attention on a cache's metadata exactly as handed out, the query in the pages' dtype; with
    `own_mask`, as the course's attention tests call: the metadata's own mask (`mask` is then the oracle's only)
    and an MLX query whatever the pages are (course_query)."""
    query = course_query(query, metadata.key_pages) if own_mask else like_pages(query, metadata.key_pages)
    return to_numpy(_over_metadata(paged_attention, query, metadata, metadata.mask if own_mask else mask), np.float64)


def course_query(values: np.ndarray, pages: Any) -> Any:
    """`values` as the course sends a query: an MLX array, in the pages' dtype, also where a pool keeps its pages
    as NumPy (float32 host pages get a float32 MLX query). Pages in a dtype MLX lacks (the reference's float64)
    have no course counterpart and get a query like them (like_pages)."""
    import mlx.core as mx

    if isinstance(pages, np.ndarray):
        name = pages.dtype.name
        if not hasattr(mx, name) or name == "float64":
            return like_pages(values, pages)
        return mx.array(values.astype(np.float32)).astype(getattr(mx, name))
    return like_pages(values, pages)


def append_for_the_courses_call(
    cache: Any, key: Any, value: Any, rows: int = 1, dense_prefix: int | None = None
) -> SimpleNamespace:
    """Append a chunk [1, H_kv, n, D] as the course's attention tests append before they attend: the last `rows`
    tokens in one update_and_fetch_paged with mask "causal", whose metadata's own mask is what they hand
    paged_attention for a query of `rows` rows; the tokens before them first, through update_and_fetch_paged, or
    through update_and_fetch in bfloat16, or with `dense_prefix` (the page size of an empty cache) in the course's
    pieces (course_dense_append) (the course's attention tests append their prefixes so, and bfloat16 to a paged
    cache one decode token at a time). The last append's metadata, read once."""
    n = key.shape[2]
    if n > rows:
        _append_prefix(cache, key[:, :, : n - rows], value[:, :, : n - rows], dense_prefix)
    return read_once(cache.update_and_fetch_paged(key[:, :, n - rows :], value[:, :, n - rows :], mask="causal"))


def append_for_a_check(cache: Any, key: Any, value: Any, course: bool, rows: int = 1) -> SimpleNamespace:
    """The metadata of an append, read once: in a course case appended as the course's attention tests append
    before they attend (append_for_the_courses_call, the last `rows` tokens with mask "causal"), in any other in
    one update_and_fetch_paged."""
    if course:
        return append_for_the_courses_call(cache, key, value, rows)
    return read_once(cache.update_and_fetch_paged(key, value))


def _append_prefix(cache: Any, key: Any, value: Any, dense_page_size: int | None) -> None:
    import mlx.core as mx

    if dense_page_size is not None:
        course_dense_append(cache, key, value, dense_page_size)
    elif key.dtype == mx.bfloat16:
        cache.update_and_fetch(key, value)
    else:
        course_paged_append(cache, key, value)


def course_dense_append(cache: Any, key: Any, value: Any, page_size: int) -> None:
    """Append a chunk [1, H_kv, n, D] to an empty cache of pages of `page_size` through update_and_fetch in pieces
    that open pages as the course's update_and_fetch calls do: two pages' worth of tokens at most first (the
    course's longest, 6 tokens in pages of 4 and 64 in pages of 32, open an empty cache's first two pages), then a
    page's worth at a time (each of its later calls opens one new page at most). So a cache whose update_and_fetch
    takes no more than two pages of tokens a call (dense_appends_of_at_most_2_pages in tests/course_variants.py),
    which the course accepts, takes what a course case writes through it."""
    first = min(key.shape[2], 2 * page_size)
    cache.update_and_fetch(key[:, :, :first], value[:, :, :first])
    for start in range(first, key.shape[2], page_size):
        stop = start + page_size
        cache.update_and_fetch(key[:, :, start:stop], value[:, :, start:stop])


def course_paged_append(cache: Any, key: Any, value: Any) -> None:
    """Append a chunk [1, H_kv, n, D] through update_and_fetch_paged in pieces of COURSE_PAGE_SIZE tokens at most,
    so that each piece opens one new page at most (pages of COURSE_PAGE_SIZE or more). The course reads a cache's
    tokens (through gather_dense(), a metadata's pages or attention over them) only after paged appends that open
    one new page at most (its prefill fills the tail page and opens one); what its appends of 5 and 17 tokens
    leave it reads only through counts and shapes. So a cache may spread the tokens of a paged append that opens
    several pages over them its own way (balanced_new_pages in tests/course_variants.py), and a course case that
    reads tokens afterwards appends in such pieces. The first piece opens an empty cache with COURSE_PAGE_SIZE tokens,
    or all of a shorter chunk (the caller opens it with COURSE_FIRST_PAGED_APPEND at least)."""
    for start in range(0, key.shape[2], COURSE_PAGE_SIZE):
        stop = start + COURSE_PAGE_SIZE
        cache.update_and_fetch_paged(key[:, :, start:stop], value[:, :, start:stop])


def the_subjects_own_metadata(
    pool_type: Callable[..., Any], cache_type: Callable[..., Any], batching_cache_type: Callable[..., Any] | None,
    layout: PagedLayout,
) -> Any:
    """`layout`'s keys and values written through the subject's own caches as the course's attention tests write
    theirs, and the metadata the caches hand out for the call (read once): the course attends only over a cache's
    metadata, its pages, table and mask as handed out (a cache may resolve "causal" into an array shaped for its
    own table, or over its pool's slots), so a course check over a layout of its own calls the same way. One
    request: a pool and cache of the subject's whose last `num_queries` tokens were appended with mask "causal"
    (append_for_the_courses_call, the tokens before them through update_and_fetch in the course's pieces,
    course_dense_append); a batch (decode only, as the course batches): each live row's request prefilled so, then
    added to a BatchingKvCache in its slot (every request prefilled before the first is added, slots in order, as
    the course adds its two), then each row's last token in one decode step with mask_length 1 and mask "causal",
    zeros in an empty slot (as the course's batch decodes, a layout's batch has no context one past a full page:
    that token stays in its request's tail page), under a max_seq_len (batch_max_seq_len) that holds the batch
    however a batch reads it. The layout's reference is then the call's oracle. None where the subject has no
    batch to ask."""
    import mlx.core as mx

    from pagecheck.reference.attention import gather_request

    lens = [int(n) for n in layout.context_lens]
    dt = getattr(mx, layout.dtype)

    def written(pages: np.ndarray, row: int) -> Any:
        """Row `row`'s tokens [1, H_kv, n, D] in the layout's dtype (its pages hold values already rounded to it)."""
        dense = gather_request(pages, layout.block_table[row], lens[row], layout.page_size)
        return mx.array(dense[None].astype(np.float32)).astype(dt)

    rows = layout.query.shape[2]
    pool = pool_type(layout.page_size)
    if len(lens) == 1:
        cache = cache_type(pool)
        return append_for_the_courses_call(
            cache, written(layout.key_pages, 0), written(layout.value_pages, 0), rows, dense_prefix=layout.page_size
        )
    if batching_cache_type is None or rows != 1:
        return None
    empty = mx.zeros((1, layout.key_pages.shape[1], 1, layout.key_pages.shape[3]), dtype=dt)
    requests = {}  # slot -> its prefilled cache
    last_keys, last_values = [], []  # each slot's decode token
    for slot, n in enumerate(lens):
        keys, values = (written(layout.key_pages, slot), written(layout.value_pages, slot)) if n else (empty, empty)
        if n:
            requests[slot] = cache_type(pool)
            if n > 1:
                _append_prefix(requests[slot], keys[:, :, : n - 1], values[:, :, : n - 1], layout.page_size)
        last_keys.append(keys[:, :, -1:])
        last_values.append(values[:, :, -1:])
    batch = batching_cache_type(len(lens), batch_max_seq_len(lens, layout.page_size))
    for slot, cache in requests.items():
        batch.add_request(cache, slot)
    step = mx.concatenate(last_keys, axis=0), mx.concatenate(last_values, axis=0)
    return read_once(batch.update_and_fetch_paged(*step, mask_length=1, mask="causal"))


@dataclass(frozen=True)
class CachesRefused:
    """What the own_metadata fixture gives where the subject's caches refused to write a layout but handed out a
    mask for the course's own call of its kind (the_courses_own_mask): course_call_on_a_layout calls the subject
    over the layout itself with that mask."""

    mask: Any


def the_courses_own_mask(
    pool_type: Callable[..., Any], cache_type: Callable[..., Any], batching_cache_type: Callable[..., Any] | None,
    layout: PagedLayout,
) -> CachesRefused | None:
    """The mask the subject's caches hand out for mask "causal" at the course's own call of `layout`'s kind, read
    once: its batch's decode step (requests of 3 and 6 tokens in slots 0 and 2 of 3, max_seq_len 16) for a batch,
    its bfloat16 decode (64 tokens, a blocker of 32, then one, in pages of 32, head dim 128) or float32 prefill (3
    tokens, then 3 in pages of 4) for one request; 2 kv heads, tokens of a fixed generator. None where the caches
    refuse that call too, or hand out an array (shaped for that call's table, not the layout's)."""
    import mlx.core as mx

    values = np.random.default_rng(0)

    def chunk(n: int, head_dim: int = COURSE_HEAD_DIM, dtype: Any = None) -> tuple[Any, Any]:
        pair = [mx.array(values.standard_normal((1, 2, n, head_dim)).astype(np.float32)) for _ in range(2)]
        return (pair[0], pair[1]) if dtype is None else (pair[0].astype(dtype), pair[1].astype(dtype))

    try:
        if len(layout.context_lens) > 1:
            if batching_cache_type is None:
                return None
            _, metadata = the_courses_batch_step(pool_type, cache_type, batching_cache_type, lambda _, n: chunk(n))
        elif layout.dtype == "bfloat16":
            pool = pool_type(32)
            cache, blocker = cache_type(pool), cache_type(pool)
            cache.update_and_fetch(*chunk(64, 128, mx.bfloat16))
            blocker.update_and_fetch(*chunk(32, 128, mx.bfloat16))
            metadata = cache.update_and_fetch_paged(*chunk(1, 128, mx.bfloat16), mask="causal")
        else:
            cache = cache_type(pool_type(COURSE_PAGE_SIZE))
            cache.update_and_fetch(*chunk(3))
            metadata = cache.update_and_fetch_paged(*chunk(3), mask="causal")
        mask = read_once(metadata).mask
    except Exception:  # noqa: BLE001 - caches that cannot serve the course's call either
        return None
    return None if hasattr(mask, "shape") else CachesRefused(mask)


def the_courses_batch_step(
    pool_type: Callable[..., Any], cache_type: Callable[..., Any], batching_cache_type: Callable[..., Any],
    chunk: Callable[[int, int], tuple[Any, Any]],
) -> tuple[list[Any], Any]:
    """The course's batch: two requests on one pool of pages of 4, of 3 and 6 tokens (`chunk(request, n)`: their
    next n keys and values [1, H_kv, n, D], drawn in the course's order), added in slots 0 and 2 of a
    BatchingKvCache of 3 slots and max_seq_len 16, then one decode step of a token each, zeros in slot 1, with
    mask_length 1 and mask "causal": the two caches, and the metadata that step handed out, unread."""
    import mlx.core as mx

    pool = pool_type(COURSE_PAGE_SIZE)
    caches = [cache_type(pool), cache_type(pool)]
    caches[0].update_and_fetch(*chunk(0, 3))
    caches[1].update_and_fetch(*chunk(1, 6))
    batch = batching_cache_type(3, 16)
    batch.add_request(caches[0], 0)
    batch.add_request(caches[1], 2)
    (k0, v0), (k2, v2) = chunk(0, 1), chunk(1, 1)
    empty = mx.zeros(k0.shape, dtype=k0.dtype)
    handed = batch.update_and_fetch_paged(
        mx.concatenate([k0, empty, k2]), mx.concatenate([v0, empty, v2]), mask_length=1, mask="causal"
    )
    return caches, handed


def batch_max_seq_len(lens: list[int], page_size: int) -> int:
    """A max_seq_len for a batch whose requests hold `lens` tokens after its step that holds them however a batch
    reads it, as the course's 16 holds its batch of 4 + 7 tokens in pages of 4 every way: per request or as a
    budget of all the tokens, or of all the pages (max_seq_len // page_size), a whole number of pages, a power of
    two (the course's 16 and 8 are each): the smallest power of two of 16 or more that holds every page of the
    batch (rounded up to whole pages where the page size is no power of two)."""
    pages = sum(-(-n // page_size) for n in lens)
    size = 16
    while size < page_size * pages:
        size *= 2
    return -(-size // page_size) * page_size


def _over_metadata(paged_attention: PagedAttention, query: Any, metadata: Any, mask: Any) -> Any:
    """paged_attention(query, then the metadata's pages, table, lengths and page size in order, mask=mask): the
    table and lengths as the subject handed them out (MetadataRead.handed) where they were no arrays."""
    handed = getattr(metadata, "handed", {})
    return paged_attention(
        query, metadata.key_pages, metadata.value_pages, handed.get("block_table", metadata.block_table),
        handed.get("context_lens", metadata.context_lens), metadata.page_size, mask=mask,
    )


def attention_as_the_course_calls(paged_attention: PagedAttention, query: Any, metadata: Any) -> Any:
    """paged_attention over a cache's metadata exactly as the course's tests call it: the query as given (not cast
    to the pages' dtype) and the metadata's own mask; the subject's output as it returns it."""
    return _over_metadata(paged_attention, query, metadata, metadata.mask)


def course_call_on_a_layout(
    paged_attention: PagedAttention, layout: PagedLayout, own_metadata: Callable[[PagedLayout], Any]
) -> np.ndarray:
    """The subject's output for a layout of a check's own, called as the course's attention tests call: over the
    metadata the subject's own caches hand out once the layout's tokens are written through them (`own_metadata`,
    the fixture; calls.the_subjects_own_metadata), with its own mask, the query as the course sends one. The
    output as float64; the layout's reference is its oracle. Where the caches refused to write the layout, the
    layout itself with the mask they hand out at the course's own call of its kind (CachesRefused); where the
    subject has no cache to ask, or its caches serve neither, the layout itself with its own mask."""
    metadata = own_metadata(layout)
    if metadata is None:
        return attention_output(paged_attention, layout)
    if isinstance(metadata, CachesRefused):
        return attention_output(paged_attention, layout, mask=metadata.mask)
    return attention_over_metadata(paged_attention, layout.query, metadata, layout.mask, own_mask=True)


# The course's pool counters (test_week_3_day_3.py's _paged_state); a pool that has them must keep them too.
POOL_COUNTERS = (
    "capacity", "reused_page_allocations", "storage_growths", "copied_pages_on_growth", "copied_bytes_on_growth",
)


def pool_state(pool: Any, *, page_data: bool = True) -> dict[str, Any]:
    """What a pool shows through its API, copied, to compare before and after a call.

    The free list keeps its order (it decides which page is reused next).
    `page_data=False` reads as the course's own snapshot (_paged_state)
    does: the page arrays unread (a pool may make them only at its first
    write, and a check that passes it compares the live tokens on its own),
    every counter of POOL_COUNTERS read, so a pool lacking one fails as
    there, and the used ids as the course's frozenset holds them
    (course_id_set); otherwise the counters a pool has.
    """
    used = pool.used_page_ids
    state: dict[str, Any] = {
        "num_pages": pool.num_pages,
        "num_free_pages": pool.num_free_pages,
        "free_page_ids": [int(i) for i in pool.free_page_ids],
        "used_page_ids": course_id_set(used) if not page_data else sorted(int(i) for i in used),
    }
    state.update({name: getattr(pool, name) for name in POOL_COUNTERS if not page_data or hasattr(pool, name)})
    if page_data:
        for name in ("key_pages", "value_pages"):
            pages = getattr(pool, name)
            state[name] = None if pages is None else to_numpy(pages, np.float64).copy()
    return state


def course_id_set(ids: Any) -> Any:
    """`ids` as the course's snapshot keeps a pool's used ids, frozenset(pool.used_page_ids), for comparing two reads:
    the items of an MLX array are new 0-d arrays at every iteration, hashed by identity, so two reads of a non-empty
    one never compare equal there (the course's snapshot comparison fails); anything else as its ints (an int's or a
    NumPy integer's hash is its value)."""
    if type(ids).__module__.startswith("mlx"):
        return _ItemsByIdentity(ids)
    return sorted(int(i) for i in ids)


class _ItemsByIdentity(frozenset):
    def __repr__(self) -> str:
        return (f"frozenset of {len(self)} MLX 0-d arrays {sorted(int(i) for i in self)} (hashed by identity: the course's "
                "frozenset(pool.used_page_ids) of another read differs)")


def same_pool_state(a: dict[str, Any], b: dict[str, Any]) -> bool:
    for name in a:
        x, y = a[name], b[name]
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if x is None or y is None or x.shape != y.shape or not np.array_equal(x, y, equal_nan=True):
                return False
        elif x != y:
            return False
    return True


def cache_state(cache: Any) -> dict[str, Any]:
    """What a cache shows through the API the course's tests read: its pages, their fill and its offset."""
    return {
        "page_ids": [int(i) for i in cache.page_ids],
        "page_lens": [int(n) for n in cache.page_lens],
        "offset": cache_length(cache),
    }


def equals_list(value: Any, expected: list[int]) -> bool:
    """`value == expected` read as a truth value, as the course's asserts read a cache's page_ids and page_lens: a
    list compares True, a tuple or an array does not (an array's comparison has no single truth value). An
    object of a sandboxed subject is compared where it lives, by its own __eq__, as the course's assert does."""
    try:
        in_worker = getattr(type(value), "_pagecheck_equals", None)
        return bool(in_worker(value, expected) if in_worker is not None else value == expected)
    except Exception:  # noqa: BLE001 - an ambiguous or failing comparison is not equal
        return False


# The course's rewind: chunks of 4, 3 and 2 tokens through update_and_fetch into pages of 4 ([4, 4, 1]), then
# rewind(3), leaving [4, 2].
COURSE_REWIND_CHUNKS = (4, 3, 2)
COURSE_REWIND = 3


def course_rewind(
    pool_type: type, cache_type: type, written: Any, rng: np.random.Generator
) -> tuple[Any, Any, str, tuple[Any, Any]]:
    """A pool of pages of 4 and a cache on it, built and rewound as the course's rewind test does, the tokens
    recorded in `written` (truncated as the rewind drops them); (pool, cache, "" where page_lens compared equal to
    [4, 4, 1] before the rewind, as the course asserts there, else what it was, the keys and values of the
    cache's gather_dense()). Read before the rewind: a page_lens that is a live view of the cache changes with
    it. The course calls gather_dense() right after rewind(3), before it reads anything else, so a cache may
    finish the rewind there (free the pages it emptied at its next read): so does this."""
    cache = cache_type(pool_type(4))  # the fixtures pass page_size= and pool= by keyword, as the course does
    for length in COURSE_REWIND_CHUNKS:
        chunk = written.make_chunk(rng, length)
        cache.update_and_fetch(*chunk)
        written.read_back(chunk)  # the course's full cache takes the arrays after the paged one changed them
    filled = "" if equals_list(cache.page_lens, [4, 4, 1]) else repr(cache.page_lens)
    cache.rewind(COURSE_REWIND)
    written.truncate(written.length - COURSE_REWIND)
    keys, values = cache.gather_dense()
    return cache.pool, cache, filled, (keys, values)  # the pool as the course's test reads it: paged.pool


def cache_length(cache: Any) -> int:
    """A one-request cache's token count as the course's tests read it: its offset (they never call
    context_lens(), which a cache the course accepts may leave unimplemented). They read it after update_and_fetch,
    rewind and release, and as a before/after snapshot around a rejected append, never after a successful
    update_and_fetch_paged: a course check reads it only where they do."""
    return int(cache.offset)


# The course pins the shapes of the metadata an append returns (block_table [B, W], context_lens [B]), not those of
# a cache's own block_table() and context_lens(): one request's row may come as [W] or [1, W], its length as [1]
# or a 0-d array. These read either as the one-row batch.
def _one_row(array: Any, ndim: int) -> Any:
    """`array` reshaped to a batch of one ([1, W] for a table, [1] for lengths) when it lacks the batch axis."""
    shape = tuple(array.shape)
    if len(shape) == ndim - 1:
        return array.reshape((1, *shape))
    return array


def own_block_table(cache: Any) -> Any:
    """cache.block_table() as a batch of one row, [1, W], in the subject's own array type; anything else (a list:
    the course pins only that the same object comes back until the pages change) read once, as an MLX int32
    array, so that the check and the subject's attention see the same table (read_table)."""
    import mlx.core as mx

    table = read_table("cache.block_table()", cache.block_table())
    # A copy, as a sandboxed subject's crosses the pipe: an attention that writes into the table it is given must
    # not change the one the cache hands out again (the course asks block_table() for the same object).
    table = table.copy() if isinstance(table, np.ndarray) else mx.array(table)
    return _one_row(table, 2)


def own_context_lens(cache: Any) -> list[int]:
    """cache.context_lens() as a list of ints: [n] for a one-request cache, whether it came as [1] or 0-d."""
    return [int(n) for n in np.asarray(to_numpy(cache.context_lens())).reshape(-1)]


def current_metadata(pool: Any, cache: Any, page_size: int) -> PagedKvMetadata:
    """A cache's metadata without appending anything, built from the public pool and cache API (the course's
    pool need not expose its page size, so the check that made the pool passes it)."""
    table = own_block_table(cache)
    pages = (_require_array("pool.key_pages", pool.key_pages), _require_array("pool.value_pages", pool.value_pages))
    return PagedKvMetadata(*pages, table, lengths_like(table, [cache_length(cache)]), page_size)


def lengths_like(table: Any, lengths: list[int]) -> Any:
    """Context lengths [B] int32 in the array type of `table` (MLX or NumPy), for the subject's attention."""
    if type(table).__module__.startswith("mlx"):
        import mlx.core as mx

        return mx.array(lengths, dtype=mx.int32)
    return np.asarray(lengths, dtype=np.int32)


def fail_on_call(subject: Any, target: Any, name: str, at: int, message: str) -> Any:
    """Make target.NAME fail at its `at`-th call (injection.FailingCall's behaviour); the wrapper, whose `calls`
    counts. A subject in another process installs it there (Subject.fail_on_call); any other, here."""
    install = getattr(subject, "fail_on_call", None)
    if install is not None:
        return install(target, name, at, message)
    return injection.install_failing_call(target, name, at, message)


def result_identity(subject: Any, target: Any, name: str) -> Any:
    """A probe of target.NAME(): called once now, its `same()` calls again and says whether the very object came
    back (injection.ResultIdentity). A subject in another process is probed there (Subject.result_identity),
    where its objects are; any other, here."""
    probe = getattr(subject, "result_identity", None)
    if probe is not None:
        return probe(target, name)
    return injection.ResultIdentity(target, name)


def watch_materialize(subject: Any, cache: Any) -> dict[str, Any]:
    """What cache.materialize() did with gather_dense and mx.eval watched (injection.watch_materialize). A
    subject in another process is watched there (Subject.watch_materialize); any other, here."""
    watch = getattr(subject, "watch_materialize", None)
    if watch is not None:
        return watch(cache)
    import mlx.core as mx

    return injection.watch_materialize(cache, mx)
