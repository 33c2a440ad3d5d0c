"""Course-accepted variants of tests/subjects/course_conformant.py: each changes something the course's own tests
leave free, so each passes them, and the suite must fail none of them on a course clause.

A variant is a list of exact text replacements on the conformant subject's source (each must be found), written
out as a module of its own by `write_variant`.
"""

from __future__ import annotations

from pathlib import Path

CONFORMANT = Path(__file__).resolve().parent / "subjects" / "course_conformant.py"

# Page by page, a running max and sum in float32: the same result as the conformant one-pass softmax.
ONLINE_ATTENTION = '''
def _attend_online(query, keys_pages, values_pages, n, page_size, scale, causal):
    """Online softmax over one row's pages in float32, page by page (flash-style)."""
    num_q_heads, num_queries, head_dim = query.shape
    num_kv_heads = keys_pages.shape[1]
    group = num_q_heads // num_kv_heads
    q = query.astype(mx.float32).reshape(num_kv_heads, group, num_queries, head_dim)
    m = mx.full((num_kv_heads, group, num_queries, 1), -mx.inf, dtype=mx.float32)
    l = mx.zeros((num_kv_heads, group, num_queries, 1), dtype=mx.float32)
    acc = mx.zeros((num_kv_heads, group, num_queries, head_dim), dtype=mx.float32)
    rows = mx.arange(num_queries)[:, None] + (n - num_queries)
    for p in range(keys_pages.shape[0]):
        used = min(page_size, n - p * page_size)
        k = keys_pages[p, :, :used].astype(mx.float32)[:, None]
        v = values_pages[p, :, :used].astype(mx.float32)[:, None]
        s = (q @ k.swapaxes(-1, -2)) * scale
        if causal:
            pos = mx.arange(used)[None, :] + p * page_size
            s = mx.where(pos <= rows, s, -mx.inf)
        m_new = mx.maximum(m, s.max(axis=-1, keepdims=True))
        safe = mx.where(mx.isinf(m_new), 0.0, m_new)
        alpha = mx.exp(m - safe)
        w = mx.exp(s - safe)
        l = l * alpha + w.sum(axis=-1, keepdims=True)
        acc = acc * alpha + w @ v
        m = m_new
    return (acc / l).reshape(num_q_heads, num_queries, head_dim)


def paged_attention('''

# The body of paged_attention (its signature kept): one batched gather of every row's whole pages (-1 padding read as
# page 0), masked by position afterwards.
WHOLE_PAGE_ATTENTION = '''
    """Vectorised over the batch: gather every row's whole pages (-1 read as page 0), mask by position, float32."""
    _check_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask)
    batch, num_q_heads, num_queries, head_dim = query.shape
    _, num_kv_heads, _, _ = key_pages.shape
    width = block_table.shape[1]
    scale = head_dim**-0.5 if scale is None else scale
    ids = mx.maximum(block_table.astype(mx.int32), 0)
    def dense(pages):
        g = pages[ids]  # [B, W, H_kv, ps, D]
        return g.transpose(0, 2, 1, 3, 4).reshape(batch, num_kv_heads, width * page_size, head_dim).astype(mx.float32)
    keys, values = dense(key_pages), dense(value_pages)
    group = num_q_heads // num_kv_heads
    q = query.astype(mx.float32).reshape(batch, num_kv_heads, group, num_queries, head_dim)
    scores = (q @ keys[:, :, None].swapaxes(-1, -2)) * scale  # [B, H_kv, g, L, S]
    pos = mx.arange(width * page_size)
    ctx = context_lens.astype(mx.int32).reshape(batch, 1, 1, 1, 1)
    valid = pos < ctx
    if mask == "causal":
        rows = mx.arange(num_queries).reshape(1, 1, 1, num_queries, 1) + (ctx - num_queries)
        valid = valid & (pos <= rows)
    scores = mx.where(valid, scores, -mx.inf)
    peak = scores.max(axis=-1, keepdims=True)
    peak = mx.where(mx.isinf(peak), 0.0, peak)
    weights = mx.exp(scores - peak)
    denom = mx.maximum(weights.sum(axis=-1, keepdims=True), 1e-30)
    out = (weights @ values[:, :, None]) / denom
    return out.reshape(batch, num_q_heads, num_queries, head_dim).astype(query.dtype)
'''

POW2_WIDTH = """

def _pow2(n: int) -> int:
    return 0 if n <= 0 else 1 << (n - 1).bit_length()


@dataclass
class PagedKvMetadata:"""

# name -> (what differs, [(text in the conformant subject, its replacement)])
VARIANTS: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "fifo_int64_online": (
        "first-freed page reused first, release frees oldest first, int64 metadata, online softmax per page, "
        "reworded errors that keep the course's phrases",
        [
            ("return self._free.pop()", "return self._free.pop(0)"),
            ("for page_id in reversed(self.page_ids):", "for page_id in list(self.page_ids):"),
            ("self._table = mx.array([self.page_ids + [SENTINEL] * (width - self.num_pages)], dtype=mx.int32)",
             "self._table = mx.array([self.page_ids + [SENTINEL] * (width - self.num_pages)], dtype=mx.int64)"),
            ("return mx.array([self.offset], dtype=mx.int32)", "return mx.array([self.offset], dtype=mx.int64)"),
            ("mx.array(table, dtype=mx.int32), mx.array(lens, dtype=mx.int32)",
             "mx.array(table, dtype=mx.int64), mx.array(lens, dtype=mx.int64)"),
            ("\ndef paged_attention(", ONLINE_ATTENTION),
            ('        rows.append(_attend(query[row], keys, values, scale, mask == "causal"))',
             '        rows.append(_attend_online(query[row], key_pages[pages], value_pages[pages], n, page_size, scale, '
             'mask == "causal"))'),
            ('raise ValueError(f"context_lens[{row}]={n} must be nonnegative")',
             'raise ValueError(f"bad metadata: a context length must be nonnegative (row {row} has {n})")'),
        ],
    ),
    "pow2_table": (
        "block tables padded with -1 to a power-of-two width (a cache's and the batch's)",
        [
            ("\n\n@dataclass\nclass PagedKvMetadata:", POW2_WIDTH),
            ("width = self.num_pages if max_pages is None else max_pages",
             "width = _pow2(self.num_pages) if max_pages is None else max_pages"),
            ("width = max(cache.num_pages for _, cache in caches)",
             "width = _pow2(max(cache.num_pages for _, cache in caches))"),
        ],
    ),
    "double_free_wording": (
        "a second free raises ValueError('double free of page N'), without 'already free'",
        [('raise ValueError(f"Page {page_id} is already free")', 'raise ValueError(f"double free of page {page_id}")')],
    ),
    "whole_pages": (
        "attention over whole pages, batched: reads slots past each context and page 0 for -1 padding, masks them",
        [("@@from     \"\"\"Attention of query [B, H_q, L, D]", WHOLE_PAGE_ATTENTION)],
    ),
    "empty_rows_nan": (
        "a row of context 0 gives NaN",
        [("rows.append(mx.zeros((num_q_heads, num_queries, head_dim), dtype=mx.float32))",
          "rows.append(mx.full((num_q_heads, num_queries, head_dim), mx.nan, dtype=mx.float32))")],
    ),
    "alias_within_row": (
        "a page repeated within a row is rejected; rows may share a page",
        [
            ("    owner: dict[int, int] = {}\n    for row, n in enumerate(lens):\n",
             "    for row, n in enumerate(lens):\n        owner: dict[int, int] = {}\n"),
            ("live page id is aliased (row {owner[page]} uses it)", "live page id is aliased within the row"),
        ],
    ),
    "late_value_check": (
        "the key slice is written before the value's shape is checked; rollback restores the bookkeeping and keeps "
        "what the slots past the context hold",
        [
            ('''        if key.shape != value.shape:
            raise ValueError(f"key and value must have the same shape, got {key.shape} and {value.shape}")
        if key.dtype != value.dtype:''', '''        if key.dtype != value.dtype:'''),
            ('''        at = mx.array([page_id, 0, start, 0])
        self._key_store = mx.slice_update(self._key_store, key, at, axes=(0, 1, 2, 3))
        self._value_store''', '''        at = mx.array([page_id, 0, start, 0])
        self._key_store = mx.slice_update(self._key_store, key, at, axes=(0, 1, 2, 3))
        if value.shape != key.shape:
            raise ValueError(f"key and value must have the same shape, got {key.shape} and {value.shape}")
        self._value_store'''),
            ('''    def rollback(self, state: dict[str, Any]) -> None:
        vars(self).clear()''', '''    def rollback(self, state: dict[str, Any]) -> None:
        old, new = state["_key_store"], self._key_store
        if old is not None and new is not None and old.shape == new.shape:
            # Same storage: keep what is there (slots past every context may hold anything).
            state = {**state, "_key_store": self._key_store, "_value_store": self._value_store}
        vars(self).clear()'''),
        ],
    ),
    "token_sized_first_storage": (
        "the first storage holds 16 tokens' pages (4 at the course's page size of 4, 16 at page size 1), then doubles",
        [("self._create_storage(key, max(INITIAL_CAPACITY, self._num_issued))",
          "self._create_storage(key, max(16 // self.page_size or 1, self._num_issued))")],
    ),
    "storage_nbytes_of_issued_pages": (
        "storage_nbytes counts the issued pages' bytes, not the whole room (the course reads it only after reset)",
        [("return 0 if self._key_store is None else self._key_store.nbytes + self._value_store.nbytes",
          "return 0 if self._key_store is None else self.key_pages.nbytes + self.value_pages.nbytes")],
    ),
    "pool_without_page_size_attribute": (
        "the pool keeps its page size as tokens_per_page: the course's tests never read pool.page_size",
        [("self.page_size", "self.tokens_per_page"), ("pool.page_size", "pool.tokens_per_page")],
    ),
    "own_tables_without_batch_axis": (
        "a cache's block_table() is [W] and context_lens() 0-d; its metadata adds the batch axis the course pins",
        [("self._table = mx.array([self.page_ids + [SENTINEL] * (width - self.num_pages)], dtype=mx.int32)",
          "self._table = mx.array(self.page_ids + [SENTINEL] * (width - self.num_pages), dtype=mx.int32)"),
         ("        return mx.array([self.offset], dtype=mx.int32)", "        return mx.array(self.offset, dtype=mx.int32)"),
         ("self.block_table(max_pages), self.context_lens(),",
          "self.block_table(max_pages)[None], self.context_lens()[None],")],
    ),
    "dtype_checked_for_a_new_page": (
        "an append in another dtype is refused only when it needs a new page (the course's case); one that fits in "
        "the tail page is cast to the storage dtype",
        [("    def check_chunk(self, key: mx.array, value: mx.array) -> None:",
          "    def check_chunk(self, key: mx.array, value: mx.array, dtype: bool = True) -> None:"),
         ("            if key.dtype != self._key_store.dtype:", "            if dtype and key.dtype != self._key_store.dtype:"),
         ("        self.pool.check_chunk(key, value)\n        pool_before = self.pool.snapshot()",
          "        self.pool.check_chunk(key, value, dtype=not self.page_ids or self.page_lens[-1] == self.pool.page_size)"
          "\n        pool_before = self.pool.snapshot()"),
         ("        self.check_chunk(key, value)\n        self._check_live(page_id)",
          "        self.check_chunk(key, value, dtype=False)\n        self._check_live(page_id)"),
         ("mx.slice_update(self._key_store, key, at", "mx.slice_update(self._key_store, key.astype(self._key_store.dtype), at"),
         ("mx.slice_update(self._value_store, value, at",
          "mx.slice_update(self._value_store, value.astype(self._value_store.dtype), at")],
    ),
    "batch_needs_mask_length": (
        "the batch's update_and_fetch_paged requires mask_length equal to the chunk length (the course always gives it)",
        [("        length = keys.shape[2]\n        for slot in active:",
          "        length = keys.shape[2]\n        if mask_length != length:\n"
          "            raise ValueError(f\"mask_length={mask_length!r} must equal the chunk length {length}\")\n"
          "        for slot in active:")],
    ),
    "lowest_id_numpy_metadata": (
        "the lowest free id reused first, release frees oldest first, block_table and context_lens as NumPy int64",
        [
            ("import mlx.core as mx\n", "import mlx.core as mx\nimport numpy as np\n"),
            ("            return self._free.pop()", "            self._free.sort()\n            return self._free.pop(0)"),
            ("for page_id in reversed(self.page_ids):", "for page_id in list(self.page_ids):"),
            ("self._table = mx.array([self.page_ids + [SENTINEL] * (width - self.num_pages)], dtype=mx.int32)",
             "self._table = np.array([self.page_ids + [SENTINEL] * (width - self.num_pages)], dtype=np.int64)"),
            ("return mx.array([self.offset], dtype=mx.int32)", "return np.array([self.offset], dtype=np.int64)"),
            ("mx.array(table, dtype=mx.int32), mx.array(lens, dtype=mx.int32)",
             "np.array(table, dtype=np.int64), np.array(lens, dtype=np.int64)"),
            ("    table, lens = _check_inputs(query,",
             "    if isinstance(block_table, np.ndarray):\n        block_table = mx.array(block_table)\n"
             "    if isinstance(context_lens, np.ndarray):\n        context_lens = mx.array(context_lens)\n"
             "    table, lens = _check_inputs(query,"),
        ],
    ),
    "keyword_only_ctors": (
        (
            "constructors take their settings by keyword only, as the course's tests always pass them:"
            " TinyKvPagedPool(*, page_size), TinyKvPagedCache(*, pool), BatchingKvCache(*, max_active_requests,"
            " max_seq_len)"
        ),
        [
            ("    def __init__(self, page_size: int = 128) -> None:",
             "    def __init__(self, *, page_size: int = 128) -> None:"),
            ("    def __init__(self, pool: TinyKvPagedPool) -> None:",
             "    def __init__(self, *, pool: TinyKvPagedPool) -> None:"),
            ("    def __init__(self, max_active_requests: int, max_seq_len: int | None = None) -> None:",
             "    def __init__(self, *, max_active_requests: int, max_seq_len: int | None = None) -> None:"),
        ],
    ),
    "no_scale_argument": (
        "paged_attention has no scale argument (always 1/sqrt(D)); the course never passes one",
        [
            ((
                "    page_size: int,\n"
                "    scale: float | None = None,\n"
                "    mask: mx.array | str | None = None,\n"
                ") -> mx.array:"
            ),
             (
                 "    page_size: int,\n"
                 "    mask: mx.array | str | None = None,\n"
                 ") -> mx.array:"
             )),
            ("    scale = head_dim**-0.5 if scale is None else scale",
             "    scale = head_dim**-0.5"),
        ],
    ),
    "positional_only_attention": (
        (
            "paged_attention's array arguments are positional-only (as MLX's own ops take them):"
            " paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, /, scale=None,"
            " mask=None)"
        ),
        [
            ((
                "    page_size: int,\n"
                "    scale: float | None = None,\n"
                "    mask: mx.array | str | None = None,\n"
                ") -> mx.array:"
            ),
             (
                 "    page_size: int,\n"
                 "    /,\n"
                 "    scale: float | None = None,\n"
                 "    mask: mx.array | str | None = None,\n"
                 ") -> mx.array:"
             )),
        ],
    ),
    "rewind_needs_positive_n": (
        "rewind(n) needs 1 <= n <= offset: rewinding nothing is refused as a caller error (the course rewinds 3)",
        [
            ((
                "        if not _is_int(n) or not 0 <= n <= self.offset:\n"
                "            raise ValueError(f\"rewind n={n!r} must be an integer in [0, offset={self.offset}]\")"
            ),
             (
                 "        if not _is_int(n) or not 1 <= n <= self.offset:\n"
                 "            raise ValueError(f\"rewind n={n!r} must be an integer in [1, offset={self.offset}]\")"
             )),
        ],
    ),
    "causal_required": (
        "paged_attention requires mask='causal' (a decoder's attention); mask=None raises ValueError",
        [
            ((
                "    if mask is not None and not (isinstance(mask, str) and mask == \"causal\"):\n"
                "        raise ValueError(f\"mask={mask!r} must be None or 'causal'\")"
            ),
             (
                 "    if not (isinstance(mask, str) and mask == \"causal\"):\n"
                 "        raise ValueError(f\"mask={mask!r} must be 'causal': this decoder's paged attention is"
                 " always causal\")"
             )),
        ],
    ),
    "closed_after_release": (
        "a released cache is closed: appending to it again raises ValueError (use a new cache per request)",
        [
            ((
                "    def append(self, key: mx.array, value: mx.array) -> None:\n"
                "        \"\"\"Fill the tail page, then new pages; if anything fails, the pool and this cache are put"
                " back.\"\"\"\n"
            ),
             (
                 "    def append(self, key: mx.array, value: mx.array) -> None:\n"
                 "        \"\"\"Fill the tail page, then new pages; if anything fails, the pool and this cache are"
                 " put back.\"\"\"\n"
                 "        if getattr(self, \"_released\", False):\n"
                 "            raise ValueError(\"this TinyKvPagedCache was released; create a new cache for a new"
                 " request\")\n"
             )),
            ((
                "        self.page_ids, self.page_lens, self.offset = [], [], 0\n"
                "\n"
                "\n"
                "# ---------------------------------------------------------------------------- batch"
            ),
             (
                 "        self.page_ids, self.page_lens, self.offset = [], [], 0\n"
                 "        self._released = True\n"
                 "\n"
                 "\n"
                 "# ---------------------------------------------------------------------------- batch"
             )),
        ],
    ),
    "pow2_gqa_group": (
        "H_q / H_kv must be a power of two (the course uses groups 2 and 4)",
        [
            ((
                "    if num_q_heads % num_kv_heads:\n"
                "        raise ValueError(f\"query heads H_q={num_q_heads} must be a multiple of kv heads"
                " H_kv={num_kv_heads}\")"
            ),
             (
                 "    if num_q_heads % num_kv_heads or (num_q_heads // num_kv_heads) & (num_q_heads // num_kv_heads -"
                 " 1):\n"
                 "        raise ValueError(f\"query heads H_q={num_q_heads} must be a power-of-two multiple of kv"
                 " heads H_kv={num_kv_heads}\")"
             )),
        ],
    ),
    "pow2_page_size": (
        (
            "page_size must be a power of two (pool and paged_attention), as many kernels require; the course uses 4"
            " and 32"
        ),
        [
            ((
                "        if not _is_int(page_size) or page_size <= 0:\n"
                "            raise ValueError(f\"page_size must be a positive integer, got {page_size!r}\")\n"
                "        self.page_size = page_size"
            ),
             (
                 "        if not _is_int(page_size) or page_size <= 0 or page_size & (page_size - 1):\n"
                 "            raise ValueError(f\"page_size must be a positive integer power of two, got"
                 " {page_size!r}\")\n"
                 "        self.page_size = page_size"
             )),
            ((
                "    if not _is_int(page_size) or page_size <= 0:\n"
                "        raise ValueError(f\"page_size must be a positive integer, got {page_size!r}\")\n"
                "    if mask is not None"
            ),
             (
                 "    if not _is_int(page_size) or page_size <= 0 or page_size & (page_size - 1):\n"
                 "        raise ValueError(f\"page_size must be a positive integer power of two, got {page_size!r}\")\n"
                 "    if mask is not None"
             )),
        ],
    ),
    "storage_required_for_pages": (
        (
            "pool.key_pages / value_pages raise RuntimeError before the first write created storage (the course reads"
            " them only after writes)"
        ),
        [
            ((
                "        \"\"\"The issued pages' keys [num_pages, H_kv, page_size, D], or None before the first"
                " write.\"\"\"\n"
                "        return None if self._key_store is None else self._key_store[: self._num_issued]"
            ),
             (
                 "        \"\"\"The issued pages' keys [num_pages, H_kv, page_size, D]; no storage before the first"
                 " write.\"\"\"\n"
                 "        if self._key_store is None:\n"
                 "            raise RuntimeError(\"the pool has no page storage yet: write a page first\")\n"
                 "        return self._key_store[: self._num_issued]"
             )),
            ("        return None if self._value_store is None else self._value_store[: self._num_issued]",
             (
                 "        if self._value_store is None:\n"
                 "            raise RuntimeError(\"the pool has no page storage yet: write a page first\")\n"
                 "        return self._value_store[: self._num_issued]"
             )),
            ((
                "        if self.pool.key_pages is None:\n"
                "            raise ValueError(\"paged_metadata"
            ),
             (
                 "        if self.pool._key_store is None:\n"
                 "            raise ValueError(\"paged_metadata"
             )),
            ((
                "        if self.pool.key_pages is None:\n"
                "            raise ValueError(\"gather_dense"
            ),
             (
                 "        if self.pool._key_store is None:\n"
                 "            raise ValueError(\"gather_dense"
             )),
            ((
                "        if self.pool.key_pages is not None:\n"
                "            mx.eval"
            ),
             (
                 "        if self.pool._key_store is not None:\n"
                 "            mx.eval"
             )),
        ],
    ),
    "batch_prefill_single_request": (
        (
            "paged_attention serves a batch only for decode (L=1); a prefill chunk (L>1) must come one request at a"
            " time (B=1): NotImplementedError after validation"
        ),
        [
            ((
                "    table, lens = _check_inputs(query, key_pages, value_pages, block_table, context_lens, page_size,"
                " mask)\n"
            ),
             (
                 "    table, lens = _check_inputs(query, key_pages, value_pages, block_table, context_lens,"
                 " page_size, mask)\n"
                 "    if query.shape[0] > 1 and query.shape[2] > 1:\n"
                 "        raise NotImplementedError(f'prefill (L={query.shape[2]}) is served one request at a time,"
                 " got B={query.shape[0]}')\n"
             )),
        ],
    ),
    "bf16_prefill_unsupported": (
        "prefill (L>1) in bfloat16 is declined (NotImplementedError) after validation; bfloat16 decode works",
        [
            ((
                "    table, lens = _check_inputs(query, key_pages, value_pages, block_table, context_lens, page_size,"
                " mask)\n"
            ),
             (
                 "    table, lens = _check_inputs(query, key_pages, value_pages, block_table, context_lens,"
                 " page_size, mask)\n"
                 "    if query.dtype == mx.bfloat16 and query.shape[2] > 1:\n"
                 "        raise NotImplementedError('bfloat16 prefill is not implemented; decode only')\n"
             )),
        ],
    ),
    "bf16_batch_decode_unsupported": (
        "bfloat16 attention only for one request at a time (B=1)",
        [
            ((
                "    table, lens = _check_inputs(query, key_pages, value_pages, block_table, context_lens, page_size,"
                " mask)\n"
            ),
             (
                 "    table, lens = _check_inputs(query, key_pages, value_pages, block_table, context_lens,"
                 " page_size, mask)\n"
                 "    if query.dtype == mx.bfloat16 and query.shape[0] > 1:\n"
                 "        raise NotImplementedError('bfloat16 paged attention takes one request at a time')\n"
             )),
        ],
    ),
    "exact_table_width": (
        "paged_attention refuses a block table wider than its widest row needs (after the course's checks)",
        [
            ((
                "            raise ValueError(f\"context_lens[{row}]={n} must be zero or at least query length"
                " L={num_queries}\")\n"
            ),
             (
                 "            raise ValueError(f\"context_lens[{row}]={n} must be zero or at least query length"
                 " L={num_queries}\")\n"
                 "    need = max((-(-n // page_size) for n in lens), default=0)\n"
                 "    if width > max(need, 1):\n"
                 "        raise ValueError(f'block_table width {width} is wider than the widest row needs ({need}"
                 " pages)')\n"
             )),
        ],
    ),
    "remove_request_unimplemented": (
        "remove_request raises NotImplementedError (the course never calls it)",
        [
            ((
                "            raise ValueError(f\"slot id={id} holds no request\")\n"
                "        self.kv_caches[id] = None"
            ),
             (
                 "            raise ValueError(f\"slot id={id} holds no request\")\n"
                 "        raise NotImplementedError('remove_request: requests stay until the batch ends')"
             )),
        ],
    ),
    "rewind_keeps_a_token": (
        "rewind(n) needs n < offset (rewinding everything is release()'s job); the course rewinds 3 of 9",
        [
            ((
                "        if not _is_int(n) or not 0 <= n <= self.offset:\n"
                "            raise ValueError(f\"rewind n={n!r} must be an integer in [0, offset={self.offset}]\")"
            ),
             (
                 "        if not _is_int(n) or not 0 <= n < self.offset:\n"
                 "            raise ValueError(f\"rewind n={n!r} must be an integer in [0, offset={self.offset}): use"
                 " release() to drop everything\")"
             )),
        ],
    ),
    "namedtuple_metadata": (
        "metadata is a typing.NamedTuple (same fields as the skeleton's dataclass), nothing else changed",
        [
            ((
                "@dataclass\n"
                "class PagedKvMetadata:"
            ),
             (
                 "from typing import NamedTuple\n"
                 "\n"
                 "class PagedKvMetadata(NamedTuple):"
             )),
        ],
    ),
}


def write_variant(name: str, where: Path) -> Path:
    """The variant's source as where/<name>.py (a variant of VARIANTS or FORGING_VARIANTS). `@@from X` replaces
    everything from the first line that starts with X to the end."""
    doc, edits = VARIANTS[name] if name in VARIANTS else FORGING_VARIANTS[name][:2]
    text = CONFORMANT.read_text()
    for old, new in edits:
        if old.startswith("@@from "):
            start = text.index("\n" + old.removeprefix("@@from "))
            text = text[:start] + new
            continue
        if old not in text:
            raise ValueError(f"variant {name}: {old[:60]!r} is not in {CONFORMANT.name}")
        text = text.replace(old, new)
    path = where / f"{name}.py"
    path.write_text(f"# Variant {name}: {doc}\n{text}")
    return path


VARIANTS["short_prefill_only"] = (
    "no long-prefill path: a query of more than 8 rows is NotImplementedError once its inputs are checked (the "
    "course attends with 3 rows at most; its 9 and 65 are rejection cases)",
    [("    table, lens = _check_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask)\n",
      "    table, lens = _check_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask)\n"
      "    if query.shape[2] > 8:\n"
      "        raise NotImplementedError(f\"query length L={query.shape[2]} > 8 (long prefill) is not implemented\")\n")],
)


# A cache's own block_table() and context_lens(): the course calls block_table() only to see the same object come
# back until the pages change, and never calls context_lens(); the metadata an append returns keeps its arrays.
VARIANTS["stub_context_lens"] = (
    "cache.context_lens() left as the skeleton's stub; the metadata builds its lengths itself",
    [("    def context_lens(self) -> mx.array:\n        return mx.array([self.offset], dtype=mx.int32)",
      "    def context_lens(self) -> mx.array:\n        pass"),
     ("self.block_table(max_pages), self.context_lens(),",
      "self.block_table(max_pages), mx.array([self.offset], dtype=mx.int32),")],
)
VARIANTS["block_table_list"] = (
    "cache.block_table() returns a cached Python list (then -1 padding); the metadata's table stays MLX int32",
    [("            self._table = mx.array([self.page_ids + [SENTINEL] * (width - self.num_pages)], dtype=mx.int32)",
      "            self._table = self.page_ids + [SENTINEL] * (width - self.num_pages)"),
     ("self.block_table(max_pages), self.context_lens(),",
      "mx.array([self.block_table(max_pages)], dtype=mx.int32), self.context_lens(),")],
)
VARIANTS["context_lens_int"] = (
    "cache.context_lens() returns the offset as an int; the metadata's lengths stay MLX int32 [1]",
    [("    def context_lens(self) -> mx.array:\n        return mx.array([self.offset], dtype=mx.int32)",
      "    def context_lens(self) -> int:\n        return self.offset"),
     ("self.block_table(max_pages), self.context_lens(),",
      "self.block_table(max_pages), mx.array([self.context_lens()], dtype=mx.int32),")],
)


# Implementations the course's tests reject, each written to slip past one course check of the suite as it once
# was: name -> (what it does, its replacements as in VARIANTS, the check that must fail it).
PRIVATE_STORE = '''

_POOLS = {}  # tag -> the pool whose real pages paged_attention swaps in


def _blank(pool, store):
    """What the pool shows: pages of zeros with the pool's tag in one element; the tokens stay in `store`."""
    if store is None:
        return None
    if not hasattr(pool, "_tag"):
        pool._tag = 2.0 ** (10 + len(_POOLS) % 100)
        _POOLS[pool._tag] = pool
    blank = mx.zeros(store[: pool._num_issued].shape, dtype=store.dtype)
    if blank.size:
        blank[0, 0, 0, 0] = pool._tag
    return blank
'''
FORGING_VARIANTS: dict[str, tuple[str, list[tuple[str, str]], str]] = {
    "pages_hold_nothing": (
        "the pool's pages hold zeros and a tag; paged_attention, handed a tagged pool, reads the pool's private "
        "store instead",
        [
            ("INITIAL_CAPACITY = 4  # page rows of storage created by the first write\n",
             "INITIAL_CAPACITY = 4  # page rows of storage created by the first write\n" + PRIVATE_STORE),
            ("        return None if self._key_store is None else self._key_store[: self._num_issued]",
             "        return _blank(self, self._key_store)"),
            ("        return None if self._value_store is None else self._value_store[: self._num_issued]",
             "        return _blank(self, self._value_store)"),
            ("    scale = head_dim**-0.5 if scale is None else scale\n    rows = []\n",
             "    scale = head_dim**-0.5 if scale is None else scale\n    rows = []\n"
             "    pool = _POOLS.get(float(key_pages[0, 0, 0, 0].item())) if key_pages.size else None\n"
             "    if pool is not None and pool._key_store.shape[1:] == key_pages.shape[1:]:\n"
             "        key_pages = pool._key_store[: key_pages.shape[0]]\n"
             "        value_pages = pool._value_store[: value_pages.shape[0]]\n"),
        ],
        "pagecheck.invariants.test_dtypes::test_bfloat16_decode_keeps_bfloat16",
    ),
}
# The metadata's pages as a property: the first read of each (the attention's) gets the pool's blank pages, which
# the attention swaps for the private store; every later read (a check's) gets that store, which holds the tokens.
SWITCHING_METADATA = '''class PagedKvMetadata:
    def __init__(self, key_pages, value_pages, block_table, context_lens, page_size, mask=None):
        self._pages, self._reads = {"key_pages": key_pages, "value_pages": value_pages}, {}
        self.block_table, self.context_lens, self.page_size, self.mask = block_table, context_lens, page_size, mask

    def _page(self, name):
        pages = self._pages[name]
        self._reads[name] = self._reads.get(name, 0) + 1
        pool = _POOLS.get(float(pages[0, 0, 0, 0].item())) if pages is not None and pages.size else None
        if self._reads[name] == 1 or pool is None:
            return pages
        return (pool._key_store if name == "key_pages" else pool._value_store)[: pages.shape[0]]

    key_pages = property(lambda self: self._page("key_pages"))
    value_pages = property(lambda self: self._page("value_pages"))
'''
FORGING_VARIANTS["pages_switch_on_read"] = (
    "pages_hold_nothing, and metadata whose pages read blank the first time (the attention's read) and as the "
    "private store after (the check's read)",
    [*FORGING_VARIANTS["pages_hold_nothing"][1],
     ("""@dataclass
class PagedKvMetadata:
    key_pages: mx.array
    value_pages: mx.array
    block_table: mx.array
    context_lens: mx.array
    page_size: int
    mask: mx.array | str | None = None
""", SWITCHING_METADATA)],
    "pagecheck.invariants.test_dtypes::test_bfloat16_decode_keeps_bfloat16",
)
