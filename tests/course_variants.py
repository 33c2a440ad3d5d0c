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


VARIANTS["max_table_width_3"] = (
    "paged_attention refuses block tables wider than 3 pages (the course attends over 3 at most)",
    [("    table, lens = _check_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask)\n",
      "    table, lens = _check_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask)\n"
      "    if block_table.shape[1] > 3:\n"
      "        raise ValueError(f\"block_table width={block_table.shape[1]} must be at most 3 pages\")\n")],
)


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


# More freedoms the course's tests leave: allocation orders, storage layouts, return types and signatures, error
# wording, and rewinds of the course's own kind only (a page's worth at most, ending inside a page, nothing
# appended after). A pool that stores its keys pre-scaled is not among them: the course's paged_attention takes
# `scale` itself, so pages hold K as written (COURSE_MAP.md, what is taken from the course's signatures).
_SOURCE = CONFORMANT.read_text()
_POOL_START, _POOL_END = "class TinyKvPagedPool:", "# ---------------------------------------------------------------------------- cache"
# The conformant pool class, whole: variants that keep their pages another way replace it.
CONFORMANT_POOL = _SOURCE[_SOURCE.index(_POOL_START) : _SOURCE.index(_POOL_END)]

CHECKED = "    table, lens = _check_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask)\n"

# One Python array per issued page; capacity and the growth counters model the room a contiguous store would have.
PAGE_LIST_POOL = '''class TinyKvPagedPool:
    """Each issued page's keys and values as arrays of their own [H_kv, page_size, D], kept in two lists;
    key_pages stacks them. capacity and the growth counters model the room of a doubling contiguous store."""

    def __init__(self, page_size: int = 128) -> None:
        if not _is_int(page_size) or page_size <= 0:
            raise ValueError(f"page_size must be a positive integer, got {page_size!r}")
        self.page_size = page_size
        self._clear()

    def _clear(self) -> None:
        self._keys: list[mx.array] = []  # one per issued page once the first write fixed the geometry
        self._values: list[mx.array] = []
        self._like: tuple[int, int, mx.Dtype] | None = None  # (H_kv, D, dtype)
        self._capacity = 0
        self._num_issued = 0
        self._free: list[int] = []
        self.reused_page_allocations = 0
        self.storage_growths = 0
        self.copied_pages_on_growth = 0
        self.copied_bytes_on_growth = 0

    @property
    def num_pages(self) -> int:
        return self._num_issued

    @property
    def num_free_pages(self) -> int:
        return len(self._free)

    @property
    def free_page_ids(self) -> list[int]:
        return list(self._free)

    @property
    def used_page_ids(self) -> list[int]:
        free = set(self._free)
        return [page_id for page_id in range(self._num_issued) if page_id not in free]

    @property
    def capacity(self) -> int:
        return self._capacity

    def _page_nbytes(self) -> int:
        heads, dim, dtype = self._like
        return heads * self.page_size * dim * dtype.size

    @property
    def storage_nbytes(self) -> int:
        return 0 if self._like is None else 2 * self._capacity * self._page_nbytes()

    @property
    def dtype(self) -> mx.Dtype | None:
        return None if self._like is None else self._like[2]

    @property
    def key_pages(self) -> mx.array | None:
        return None if self._like is None else mx.stack(self._keys)

    @property
    def value_pages(self) -> mx.array | None:
        return None if self._like is None else mx.stack(self._values)

    def _blank(self) -> mx.array:
        heads, dim, dtype = self._like
        return mx.zeros((heads, self.page_size, dim), dtype=dtype)

    def allocate_page(self) -> int:
        if self._free:
            self.reused_page_allocations += 1
            return self._free.pop()
        page_id = self._num_issued
        if self._like is not None:
            if page_id >= self._capacity:
                self._grow(page_id + 1)
            self._keys.append(self._blank())
            self._values.append(self._blank())
        self._num_issued += 1
        return page_id

    def free_page(self, page_id: int) -> None:
        self._check_issued(page_id)
        if page_id in self._free:
            raise ValueError(f"Page {page_id} is already free")
        self._free.append(page_id)

    def reset(self) -> None:
        live = self.used_page_ids
        if live:
            raise ValueError(f"cannot reset the pool: pages {live} are still live")
        self._clear()

    def check_chunk(self, key: mx.array, value: mx.array) -> None:
        for name, array in (("key", key), ("value", value)):
            if not isinstance(array, mx.array):
                raise ValueError(f"{name} must be an mlx.core.array, got {type(array).__name__}")
            _check_supported(f"paged KV storage ({name} dtype)", array.dtype)
        if key.shape != value.shape:
            raise ValueError(f"key and value must have the same shape, got {key.shape} and {value.shape}")
        if key.dtype != value.dtype:
            raise ValueError(f"key and value must have the same dtype, got {key.dtype} and {value.dtype}")
        if key.ndim != 4 or key.shape[0] != 1 or key.shape[2] == 0:
            raise ValueError(f"key shape={key.shape} must be [1, H_kv, S, D] with S >= 1")
        if self._like is not None:
            heads, dim, dtype = self._like
            if key.dtype != dtype:
                raise ValueError(
                    f"key dtype {_dtype_name(key.dtype)} does not match the existing page storage dtype "
                    f"{_dtype_name(dtype)}"
                )
            if (key.shape[1], key.shape[3]) != (heads, dim):
                raise ValueError(f"key shape={key.shape} does not match the page storage [*, {heads}, *, {dim}]")

    def write_page_slice(self, page_id: int, start: int, key: mx.array, value: mx.array) -> None:
        self.check_chunk(key, value)
        self._check_live(page_id)
        length = key.shape[2]
        if not _is_int(start) or not 0 <= start < self.page_size:
            raise ValueError(f"start={start!r} is outside a page of size {self.page_size}")
        if start + length > self.page_size:
            raise ValueError(f"write of {length} tokens at start={start} runs past the page end ({self.page_size})")
        if self._like is None:
            self._like = (key.shape[1], key.shape[3], key.dtype)
            self._capacity = max(INITIAL_CAPACITY, self._num_issued)
            self.storage_growths += 1
            self._keys = [self._blank() for _ in range(self._num_issued)]
            self._values = [self._blank() for _ in range(self._num_issued)]
        at = mx.array([0, start, 0])
        self._keys[page_id] = mx.slice_update(self._keys[page_id], key[0], at, axes=(0, 1, 2))
        self._values[page_id] = mx.slice_update(self._values[page_id], value[0], at, axes=(0, 1, 2))

    def read_page(self, page_id: int) -> tuple[mx.array, mx.array]:
        self._check_live(page_id)
        if self._like is None:
            raise ValueError(f"page_id={page_id} has no storage yet: nothing was written to this pool")
        return self._keys[page_id][None], self._values[page_id][None]

    def snapshot(self) -> dict[str, Any]:
        state = dict(vars(self))
        state["_free"] = list(self._free)
        state["_keys"] = list(self._keys)
        state["_values"] = list(self._values)
        return state

    def rollback(self, state: dict[str, Any]) -> None:
        vars(self).clear()
        vars(self).update(state)

    def _check_issued(self, page_id: int) -> None:
        if not _is_int(page_id) or not 0 <= page_id < self._num_issued:
            raise ValueError(f"page_id={page_id!r} was never issued by this pool ({self._num_issued} issued)")

    def _check_live(self, page_id: int) -> None:
        self._check_issued(page_id)
        if page_id in self._free:
            raise ValueError(f"page_id={page_id} is free; only a live page can be written or read")

    def _grow(self, needed: int) -> None:
        old_rows = self._capacity
        self.copied_bytes_on_growth += self.storage_nbytes
        self._capacity = max(needed, 2 * old_rows)
        self.storage_growths += 1
        self.copied_pages_on_growth += old_rows


'''

# name -> (what differs, [(text in the conformant subject, its replacement)])
# The conformant cache's rewind loop, which the rewind variants replace.
REWIND_LOOP = '''        left = n
        while left:
            drop = min(left, self.page_lens[-1])
            self.page_lens[-1] -= drop
            left -= drop
            if self.page_lens[-1] == 0:
                self.pool.free_page(self.page_ids.pop())
                self.page_lens.pop()'''

VARIANTS.update({
    # ---------------------------------------------------------------- attention capabilities
    "batch_prefill_declined_up_front": (
        "paged_attention serves a batch only for decode: B > 1 with L > 1 is NotImplementedError at once, before "
        "the metadata is validated (every course call with L > 1 has B = 1)",
        [(CHECKED,
          "    if query.ndim == 4 and query.shape[0] > 1 and query.shape[2] > 1:\n"
          "        raise NotImplementedError(f'batched prefill (B={query.shape[0]}, L={query.shape[2]}) is not "
          "supported: prefill one request at a time')\n" + CHECKED)],
    ),
    "direct_path_only": (
        "only the direct kernel (queries of at most 3 rows, the course's longest attended query); longer queries "
        "are NotImplementedError once validated (the course's 9 and 65 are rejection cases only)",
        [(CHECKED, CHECKED +
          "    if query.shape[2] > 3:\n"
          "        raise NotImplementedError(f'query length L={query.shape[2]}: only the direct path (L <= 3) is "
          "implemented')\n")],
    ),
    "bf16_native_compute": (
        "attention computed in the query's own dtype (bfloat16 scores, softmax and sums), no float32 upcast",
        [("    grouped = query.astype(mx.float32).reshape(num_kv_heads, group, num_queries, head_dim)",
          "    grouped = query.reshape(num_kv_heads, group, num_queries, head_dim)"),
         ("    scores = (grouped @ keys.astype(mx.float32)[:, None].swapaxes(-1, -2)) * scale",
          "    scores = (grouped @ keys[:, None].swapaxes(-1, -2)) * mx.array(scale, dtype=query.dtype)"),
         ("    out = weights @ values.astype(mx.float32)[:, None]", "    out = weights @ values[:, None]"),
         ("rows.append(mx.zeros((num_q_heads, num_queries, head_dim), dtype=mx.float32))",
          "rows.append(mx.zeros((num_q_heads, num_queries, head_dim), dtype=query.dtype))")],
    ),
    "int32_metadata_required": (
        "paged_attention takes block_table and context_lens as int32 only (the kernel's index type; the course "
        "always passes int32), any other integer type is a ValueError",
        [("        if not mx.issubdtype(array.dtype, mx.integer):\n"
          "            raise ValueError(f\"{name} dtype={array.dtype} must be an integer type\")",
          "        if not isinstance(array, mx.array) or array.dtype != mx.int32:\n"
          "            raise ValueError(f\"{name} must be an mlx int32 array, got {getattr(array, 'dtype', type(array))}\")")],
    ),
    "value_error_subclasses_reworded": (
        "validation errors are ValueError subclasses (PagedMetadataError, PageStorageError) with reworded messages "
        "that keep only the course's phrases",
        [("def _dtype_name(dtype: mx.Dtype) -> str:",
          "class PagedMetadataError(ValueError):\n    \"\"\"Bad paged_attention inputs.\"\"\"\n\n\n"
          "class PageStorageError(ValueError):\n    \"\"\"A chunk the pool cannot store.\"\"\"\n\n\n"
          "def _dtype_name(dtype: mx.Dtype) -> str:"),
         ('raise ValueError(f"context_lens[{row}]={n} must be nonnegative")',
          'raise PagedMetadataError(f"request {row}: a context length must be nonnegative, got {n}")'),
         ('raise ValueError(f"context_lens[{row}]={n} needs {live} pages: not covered by block_table width {width}")',
          'raise PagedMetadataError(f"request {row}: {n} tokens are not covered by a table of {width} pages")'),
         ('f"block_table[{row}, {col}]={page}: live page id is outside physical page storage [0, {num_pages})"',
          'f"request {row}, page slot {col}: id {page} is outside physical page storage"'),
         ('raise ValueError(f"block_table[{row}, {col}]={page}: live page id is aliased (row {owner[page]} uses it)")',
          'raise PagedMetadataError(f"request {row}: page {page} is aliased")'),
         ('f"block_table[{row}, {col}]={table[row][col]} is past context {n} and must use the -1 sentinel"',
          'f"request {row}: unused slot {col} must use the -1 sentinel"'),
         ('raise ValueError(f"context_lens[{row}]={n} must be zero or at least query length L={num_queries}")',
          'raise PagedMetadataError(f"request {row}: a live context must be zero or at least query length")'),
         ('        raise ValueError(f"page_size must be a positive integer, got {page_size!r}")\n    if mask',
          '        raise PagedMetadataError("page_size: expected a positive integer")\n    if mask'),
         ('                raise ValueError(\n                    f"key dtype {_dtype_name(key.dtype)} does not match '
          'the existing page storage dtype "\n                    f"{_dtype_name(self._key_store.dtype)}"\n',
          '                raise PageStorageError(\n                    "cannot append: it differs from the existing '
          'page storage dtype"\n'),
         ('raise ValueError(f"key and value must have the same shape, got {key.shape} and {value.shape}")',
          'raise PageStorageError("K/V chunk rejected: key and value need the same shape")'),
         ('raise ValueError(f"the active requests must share one page pool; slots {active} use {len(pools)} pools")',
          'raise PageStorageError("batched requests must share one page pool")')],
    ),
    "extra_keyword_options": (
        "extra keyword options with defaults: TinyKvPagedPool(page_size, *, initial_capacity=4, growth_factor=2), "
        "TinyKvPagedCache(pool, *, name=None), paged_attention(..., mask=None, *, validate=True)",
        [("    def __init__(self, page_size: int = 128) -> None:",
          "    def __init__(self, page_size: int = 128, *, initial_capacity: int = INITIAL_CAPACITY, "
          "growth_factor: int = 2) -> None:\n        self.initial_capacity, self.growth_factor = initial_capacity, growth_factor"),
         ("self._create_storage(key, max(INITIAL_CAPACITY, self._num_issued))",
          "self._create_storage(key, max(self.initial_capacity, self._num_issued))"),
         ("        rows = max(needed, 2 * old_rows)", "        rows = max(needed, self.growth_factor * old_rows)"),
         ("    def __init__(self, pool: TinyKvPagedPool) -> None:\n        self.pool = pool",
          "    def __init__(self, pool: TinyKvPagedPool, *, name: str | None = None) -> None:\n"
          "        self.pool = pool\n        self.name = name"),
         ("    mask: mx.array | str | None = None,\n) -> mx.array:",
          "    mask: mx.array | str | None = None,\n    *,\n    validate: bool = True,\n) -> mx.array:"),
         (CHECKED, "    if not validate:\n        raise ValueError('validate=False is not supported')\n" + CHECKED)],
    ),
    # ---------------------------------------------------------------- allocation order
    "highest_free_first": (
        "the highest free id is reused first (fresh ids still ascend from 0)",
        [("            return self._free.pop()", "            self._free.sort()\n            return self._free.pop()")],
    ),
    "random_free_page": (
        "a free page is reused at random (a seeded generator per pool), not in any fixed order",
        [("import mlx.core as mx\n", "import random\n\nimport mlx.core as mx\n"),
         ("        self._free: list[int] = []\n",
          "        self._free: list[int] = []\n        self._rng = random.Random(0xC0FFEE)\n"),
         ("            return self._free.pop()", "            return self._free.pop(self._rng.randrange(len(self._free)))")],
    ),
    "reserve_then_write": (
        "an append takes every new page it needs first, then writes them; the first storage starts at 4 pages and "
        "doubles up to the pages already issued",
        [("self._create_storage(key, max(INITIAL_CAPACITY, self._num_issued))",
          "self._create_storage(key, INITIAL_CAPACITY)\n"
          "            if self._num_issued > self.capacity:\n                self._grow(self._num_issued)"),
         ('''        written = 0
        while written < length:
            if not self.page_ids or self.page_lens[-1] == page_size:
                self.page_ids.append(self.pool.allocate_page())
                self.page_lens.append(0)
            start = self.page_lens[-1]
            stop = written + min(page_size - start, length - written)
            self.pool.write_page_slice(self.page_ids[-1], start, key[:, :, written:stop], value[:, :, written:stop])
            self.page_lens[-1] += stop - written
            self.offset += stop - written
            written = stop''', '''        room = page_size - self.page_lens[-1] if self.page_ids else 0
        col = len(self.page_ids) - (1 if room else 0)
        for _ in range(-(-(length - room) // page_size) if length > room else 0):
            self.page_ids.append(self.pool.allocate_page())
            self.page_lens.append(0)
        written = 0
        while written < length:
            start = self.page_lens[col]
            stop = written + min(page_size - start, length - written)
            self.pool.write_page_slice(self.page_ids[col], start, key[:, :, written:stop], value[:, :, written:stop])
            self.page_lens[col] += stop - written
            self.offset += stop - written
            written = stop
            col += 1''')],
    ),
    # ---------------------------------------------------------------- storage layouts
    "heads_first_storage": (
        "the stores are [H_kv, capacity, page_size, D]; key_pages / value_pages / read_page transpose to the "
        "course's [P, H_kv, page_size, D]",
        [("        return 0 if self._key_store is None else self._key_store.shape[0]",
          "        return 0 if self._key_store is None else self._key_store.shape[1]"),
         ("        return None if self._key_store is None else self._key_store[: self._num_issued]",
          "        return None if self._key_store is None else self._key_store[:, : self._num_issued].transpose(1, 0, 2, 3)"),
         ("        return None if self._value_store is None else self._value_store[: self._num_issued]",
          "        return None if self._value_store is None else self._value_store[:, : self._num_issued].transpose(1, 0, 2, 3)"),
         ("            _, heads, _, dim = self._key_store.shape", "            heads, _, _, dim = self._key_store.shape"),
         ('''        at = mx.array([page_id, 0, start, 0])
        self._key_store = mx.slice_update(self._key_store, key, at, axes=(0, 1, 2, 3))
        self._value_store = mx.slice_update(self._value_store, value, at, axes=(0, 1, 2, 3))''',
          '''        at = mx.array([0, page_id, start, 0])
        self._key_store = mx.slice_update(self._key_store, key.transpose(1, 0, 2, 3), at, axes=(0, 1, 2, 3))
        self._value_store = mx.slice_update(self._value_store, value.transpose(1, 0, 2, 3), at, axes=(0, 1, 2, 3))'''),
         ("        return self._key_store[page_id : page_id + 1], self._value_store[page_id : page_id + 1]",
          "        return (self._key_store[:, page_id : page_id + 1].transpose(1, 0, 2, 3),\n"
          "                self._value_store[:, page_id : page_id + 1].transpose(1, 0, 2, 3))"),
         ("        shape = (rows, like.shape[1], self.page_size, like.shape[3])",
          "        shape = (like.shape[1], rows, self.page_size, like.shape[3])"),
         ('''        padding = mx.zeros((rows - old_rows, *self._key_store.shape[1:]), dtype=self._key_store.dtype)
        self.copied_bytes_on_growth += self.storage_nbytes
        self._key_store = mx.concatenate([self._key_store, padding])
        self._value_store = mx.concatenate([self._value_store, padding])''',
          '''        heads, _, page_size, dim = self._key_store.shape
        padding = mx.zeros((heads, rows - old_rows, page_size, dim), dtype=self._key_store.dtype)
        self.copied_bytes_on_growth += self.storage_nbytes
        self._key_store = mx.concatenate([self._key_store, padding], axis=1)
        self._value_store = mx.concatenate([self._value_store, padding], axis=1)''')],
    ),
    "one_kv_store": (
        "keys and values in one store [2, capacity, H_kv, page_size, D], written with one slice_update per write",
        [("        self._key_store: mx.array | None = None\n        self._value_store: mx.array | None = None\n",
          "        self._kv: mx.array | None = None  # [2, capacity, H_kv, page_size, D]\n"),
         ("    # -- counts -----------------------------------------------------------------\n",
          "    @property\n    def _key_store(self) -> mx.array | None:\n"
          "        return None if self._kv is None else self._kv[0]\n\n"
          "    @property\n    def _value_store(self) -> mx.array | None:\n"
          "        return None if self._kv is None else self._kv[1]\n\n"
          "    # -- counts -----------------------------------------------------------------\n"),
         ('''        at = mx.array([page_id, 0, start, 0])
        self._key_store = mx.slice_update(self._key_store, key, at, axes=(0, 1, 2, 3))
        self._value_store = mx.slice_update(self._value_store, value, at, axes=(0, 1, 2, 3))''',
          '''        at = mx.array([0, page_id, 0, start, 0])
        self._kv = mx.slice_update(self._kv, mx.stack([key, value]), at, axes=(0, 1, 2, 3, 4))'''),
         ('''        self._key_store = mx.zeros(shape, dtype=like.dtype)
        self._value_store = mx.zeros(shape, dtype=like.dtype)''',
          '''        self._kv = mx.zeros((2, *shape), dtype=like.dtype)'''),
         ('''        padding = mx.zeros((rows - old_rows, *self._key_store.shape[1:]), dtype=self._key_store.dtype)
        self.copied_bytes_on_growth += self.storage_nbytes
        self._key_store = mx.concatenate([self._key_store, padding])
        self._value_store = mx.concatenate([self._value_store, padding])''',
          '''        padding = mx.zeros((2, rows - old_rows, *self._kv.shape[2:]), dtype=self._kv.dtype)
        self.copied_bytes_on_growth += self.storage_nbytes
        self._kv = mx.concatenate([self._kv, padding], axis=1)''')],
    ),
    "page_list_storage": (
        "each page's keys and values are arrays of their own in two lists (key_pages stacks them); capacity and the "
        "growth counters model a doubling store",
        [(CONFORMANT_POOL, PAGE_LIST_POOL)],
    ),
    "float32_master_storage": (
        "the pool stores every dtype as float32 and hands key_pages / value_pages / read_page back in the dtype of "
        "its first write",
        [('''    def dtype(self) -> mx.Dtype | None:
        return None if self._key_store is None else self._key_store.dtype''',
          '''    def dtype(self) -> mx.Dtype | None:
        return None if self._key_store is None else self._dtype'''),
         ("        return None if self._key_store is None else self._key_store[: self._num_issued]",
          "        return None if self._key_store is None else self._key_store[: self._num_issued].astype(self._dtype)"),
         ("        return None if self._value_store is None else self._value_store[: self._num_issued]",
          "        return None if self._value_store is None else self._value_store[: self._num_issued].astype(self._dtype)"),
         ("            if key.dtype != self._key_store.dtype:", "            if key.dtype != self._dtype:"),
         ("                    f\"{_dtype_name(self._key_store.dtype)}\"", "                    f\"{_dtype_name(self._dtype)}\""),
         ("self._key_store = mx.slice_update(self._key_store, key, at",
          "self._key_store = mx.slice_update(self._key_store, key.astype(mx.float32), at"),
         ("self._value_store = mx.slice_update(self._value_store, value, at",
          "self._value_store = mx.slice_update(self._value_store, value.astype(mx.float32), at"),
         ("        return self._key_store[page_id : page_id + 1], self._value_store[page_id : page_id + 1]",
          "        return (self._key_store[page_id : page_id + 1].astype(self._dtype),\n"
          "                self._value_store[page_id : page_id + 1].astype(self._dtype))"),
         ('''        self._key_store = mx.zeros(shape, dtype=like.dtype)
        self._value_store = mx.zeros(shape, dtype=like.dtype)''',
          '''        self._dtype = like.dtype
        self._key_store = mx.zeros(shape, dtype=mx.float32)
        self._value_store = mx.zeros(shape, dtype=mx.float32)''')],
    ),
    "nan_poisoned_storage": (
        "page storage starts as NaN, not zeros (a debug poison for slots no token was written to)",
        [("        self._key_store = mx.zeros(shape, dtype=like.dtype)\n        self._value_store = mx.zeros(shape, dtype=like.dtype)",
          "        self._key_store = mx.full(shape, mx.nan, dtype=like.dtype)\n"
          "        self._value_store = mx.full(shape, mx.nan, dtype=like.dtype)"),
         ("        padding = mx.zeros((rows - old_rows, *self._key_store.shape[1:]), dtype=self._key_store.dtype)",
          "        padding = mx.full((rows - old_rows, *self._key_store.shape[1:]), mx.nan, dtype=self._key_store.dtype)")],
    ),
    # ---------------------------------------------------------------- return and attribute types
    "numpy_ints_and_lists": (
        "ids and counts as NumPy int64 (allocate_page, num_pages), free_page_ids a tuple, used_page_ids a frozenset, "
        "update_and_fetch returns a list",
        [("import mlx.core as mx\n", "import mlx.core as mx\nimport numpy as np\n"),
         ("    return isinstance(x, int) and not isinstance(x, bool)",
          "    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))"),
         ("        \"\"\"Page ids issued so far, live or free.\"\"\"\n        return self._num_issued",
          "        \"\"\"Page ids issued so far, live or free.\"\"\"\n        return np.int64(self._num_issued)"),
         ("    def free_page_ids(self) -> list[int]:\n        return list(self._free)",
          "    def free_page_ids(self) -> tuple[int, ...]:\n        return tuple(self._free)"),
         ("        return [page_id for page_id in range(self._num_issued) if page_id not in free]",
          "        return frozenset(page_id for page_id in range(self._num_issued) if page_id not in free)"),
         ("        self._num_issued += 1\n        return page_id", "        self._num_issued += 1\n        return np.int64(page_id)"),
         ("        keys, values = self.gather_dense()\n        return keys, values, self.offset, mask",
          "        keys, values = self.gather_dense()\n        return [keys, values, np.int64(self.offset), mask]"),
         ("mx.array([self.page_ids + [SENTINEL]", "mx.array([[int(p) for p in self.page_ids] + [SENTINEL]"),
         ("            table[slot][: cache.num_pages] = cache.page_ids",
          "            table[slot][: cache.num_pages] = [int(p) for p in cache.page_ids]"),
         ("pages[mx.array(self.page_ids, dtype=mx.int32)]", "pages[mx.array([int(p) for p in self.page_ids], dtype=mx.int32)]"),
         ("        if live:\n            raise ValueError(f\"cannot reset", "        if len(live):\n            raise ValueError(f\"cannot reset"),
         ("        at = mx.array([page_id, 0, start, 0])", "        at = mx.array([int(page_id), 0, int(start), 0])")],
    ),
    "page_ids_as_copies": (
        "a cache keeps its ids and fills privately; page_ids / page_lens are properties returning fresh list copies "
        "(assignable)",
        [("self.page_ids", "self._ids"), ("self.page_lens", "self._lens"),
         ("    @property\n    def num_pages(self) -> int:\n        return len(self._ids)",
          "    @property\n    def num_pages(self) -> int:\n        return len(self._ids)\n\n"
          "    @property\n    def page_ids(self) -> list[int]:\n        return list(self._ids)\n\n"
          "    @page_ids.setter\n    def page_ids(self, ids: list[int]) -> None:\n        self._ids = list(ids)\n\n"
          "    @property\n    def page_lens(self) -> list[int]:\n        return list(self._lens)\n\n"
          "    @page_lens.setter\n    def page_lens(self, lens: list[int]) -> None:\n        self._lens = list(lens)")],
    ),
    "metadata_always_causal": (
        "a cache's and the batch's metadata always carry mask 'causal' (a decoder's only mask; one query row: the "
        "same as none)",
        [("            self.pool.page_size, mask,\n        )", "            self.pool.page_size, \"causal\",\n        )"),
         ("            pool.page_size, mask,\n        )", "            pool.page_size, \"causal\",\n        )")],
    ),
    "batch_requires_max_seq_len": (
        "BatchingKvCache's max_seq_len is required (a positive integer); the course always passes it",
        [("    def __init__(self, max_active_requests: int, max_seq_len: int | None = None) -> None:",
          "    def __init__(self, max_active_requests: int, max_seq_len: int) -> None:\n"
          "        if not _is_int(max_seq_len) or max_seq_len <= 0:\n"
          "            raise ValueError(f\"max_seq_len must be a positive integer, got {max_seq_len!r}\")")],
    ),
    # ---------------------------------------------------------------- lifecycle edges the course never reaches
    "reset_drops_live_pages": (
        "reset() of a pool with live pages drops them too (the course resets only an idle pool); reused_page_"
        "allocations is a lifetime count that reset keeps",
        [('''        live = self.used_page_ids
        if live:
            raise ValueError(f"cannot reset the pool: pages {live} are still live")
        self._clear()''', '''        reused = self.reused_page_allocations
        self._clear()
        self.reused_page_allocations = reused''')],
    ),
    "rewind_keeps_empty_tail": (
        "a rewind that ends on a page boundary keeps the emptied tail page for the next token (the course rewinds "
        "3 of 9, inside a page); tables list only the pages that hold tokens",
        [(REWIND_LOOP, '''        left = n
        while left:
            if self.page_lens[-1] == 0:
                self.pool.free_page(self.page_ids.pop())
                self.page_lens.pop()
                continue
            drop = min(left, self.page_lens[-1])
            self.page_lens[-1] -= drop
            left -= drop
            if self.page_lens[-1] == 0 and left:
                self.pool.free_page(self.page_ids.pop())
                self.page_lens.pop()'''),
         ('''        width = self.num_pages if max_pages is None else max_pages
        if not _is_int(width) or width < self.num_pages:
            raise ValueError(f"max_pages={max_pages!r} must be an integer >= num_pages={self.num_pages}")
        key = (tuple(self.page_ids), width)
        if self._table_key != key:
            self._table = mx.array([self.page_ids + [SENTINEL] * (width - self.num_pages)], dtype=mx.int32)''',
          '''        held = self.page_ids[: -(-self.offset // self.pool.page_size)]
        width = len(held) if max_pages is None else max_pages
        if not _is_int(width) or width < len(held):
            raise ValueError(f"max_pages={max_pages!r} must be an integer >= {len(held)} pages")
        key = (tuple(held), width)
        if self._table_key != key:
            self._table = mx.array([held + [SENTINEL] * (width - len(held))], dtype=mx.int32)'''),
         ('''        picked = pages[mx.array(self.page_ids, dtype=mx.int32)] if self.page_ids else pages[:0]
        tokens = picked.transpose(1, 0, 2, 3).reshape(num_heads, self.num_pages * page_size, head_dim)''',
          '''        picked = pages[mx.array(self.page_ids, dtype=mx.int32)] if self.page_ids else pages[:0]
        tokens = picked.transpose(1, 0, 2, 3).reshape(num_heads, picked.shape[0] * page_size, head_dim)'''),
         ('''        for slot, cache in caches:
            table[slot][: cache.num_pages] = cache.page_ids''', '''        width = max(-(-cache.offset // cache.pool.page_size) for _, cache in caches)
        table = [[SENTINEL] * width for _ in range(self.max_active_requests)]
        for slot, cache in caches:
            held = -(-cache.offset // cache.pool.page_size)
            table[slot][:held] = cache.page_ids[:held]''')],
    ),
})

VARIANTS.update({
    "batch_decode_only": (
        "BatchingKvCache appends one token per request per call (decode); a chunk of S > 1 through the batch is "
        "NotImplementedError (the course prefills each request on its own cache)",
        [("        length = keys.shape[2]\n        for slot in active:",
          "        length = keys.shape[2]\n        if length != 1:\n"
          "            raise NotImplementedError(f\"BatchingKvCache decodes one token per request, got S={length}\")\n"
          "        for slot in active:")],
    ),
    "numpy_output_for_float32": (
        "paged_attention returns a NumPy float32 array for float32 inputs (an MLX array for bfloat16)",
        [("import mlx.core as mx\n", "import mlx.core as mx\nimport numpy as np\n"),
         ("    return mx.stack(rows).astype(query.dtype)",
          "    out = mx.stack(rows).astype(query.dtype)\n    return np.array(out) if query.dtype == mx.float32 else out")],
    ),
    "mask_before_scale": (
        "paged_attention's options in the other order: (..., page_size, mask=None, scale=None)",
        [("    page_size: int,\n    scale: float | None = None,\n    mask: mx.array | str | None = None,\n) -> mx.array:",
          "    page_size: int,\n    mask: mx.array | str | None = None,\n    scale: float | None = None,\n) -> mx.array:")],
    ),
    "locality_hint_allocation": (
        "allocate_page(near=None) hands out the id after `near` when it is free (the cache passes its last page), "
        "else the most recently freed id, else a fresh one",
        [("    def allocate_page(self) -> int:\n        \"\"\"The most recently freed id, or a fresh one (growing the storage when it is full).\"\"\"\n"
          "        if self._free:\n            self.reused_page_allocations += 1\n            return self._free.pop()",
          "    def allocate_page(self, near: int | None = None) -> int:\n"
          "        \"\"\"The free id after `near`, else the most recently freed id, else a fresh one.\"\"\"\n"
          "        if self._free:\n            self.reused_page_allocations += 1\n"
          "            if near is not None and near + 1 in self._free:\n"
          "                self._free.remove(near + 1)\n                return near + 1\n"
          "            return self._free.pop()"),
         ("                self.page_ids.append(self.pool.allocate_page())",
          "                self.page_ids.append(self.pool.allocate_page(self.page_ids[-1] if self.page_ids else None))")],
    ),
    "rewind_frees_in_page_order": (
        "rewind collects the pages it empties and frees them oldest first",
        [(REWIND_LOOP, '''        left, emptied = n, []
        while left:
            drop = min(left, self.page_lens[-1])
            self.page_lens[-1] -= drop
            left -= drop
            if self.page_lens[-1] == 0:
                emptied.append(self.page_ids.pop())
                self.page_lens.pop()
        for page_id in reversed(emptied):
            self.pool.free_page(page_id)''')],
    ),
    "rewind_frees_emptied_pages_lazily": (
        "rewind lowers page_lens and offset and leaves the pages it empties in page_ids (a 0 in page_lens); the "
        "cache's next gather_dense() or append gives them back to the pool (the course calls gather_dense() "
        "right after its rewind(3), before it reads anything)",
        [
            ('        """Fill the tail page, then new pages; if anything fails, the pool and this cache are put back."""\n',
             '        """Fill the tail page, then new pages; if anything fails, the pool and this cache are put back."""\n'
             '        self._settle()\n'),
            ('    def gather_dense(self) -> tuple[mx.array, mx.array]:\n'
             '        """This request\'s tokens, dense, each [1, H_kv, offset, D]."""\n',
             '    def _settle(self) -> None:\n'
             '        while self.page_lens and self.page_lens[-1] == 0:\n'
             '            self.pool.free_page(self.page_ids.pop())\n'
             '            self.page_lens.pop()\n\n'
             '    def gather_dense(self) -> tuple[mx.array, mx.array]:\n'
             '        """This request\'s tokens, dense, each [1, H_kv, offset, D]."""\n'
             '        self._settle()\n'),
            (REWIND_LOOP, '''        left, i = n, len(self.page_lens) - 1
        while left:  # pages left empty are given back at the cache's next read or write (_settle)
            drop = min(left, self.page_lens[i])
            self.page_lens[i] -= drop
            left -= drop
            if self.page_lens[i] == 0:
                i -= 1'''),
        ],
    ),
})

VARIANTS["rewind_at_most_a_page"] = (
    "rewind(n) takes back at most one page of tokens (1 <= n <= page_size: a rejected speculative draft); "
    "the course rewinds 3 with pages of 4",
    [("        if not _is_int(n) or not 0 <= n <= self.offset:\n"
      "            raise ValueError(f\"rewind n={n!r} must be an integer in [0, offset={self.offset}]\")",
      "        if not _is_int(n) or not 0 <= n <= min(self.offset, self.pool.page_size):\n"
      "            raise ValueError(f\"rewind n={n!r} must be an integer in [0, min(offset={self.offset}, "
      "page_size={self.pool.page_size})]\")")],
)


# Sizes and schedules the course never reaches (pools, requests, tables, batches), capabilities declined up front,
# and pool, cache and batch behaviour its tests leave free.
VARIANTS.update({
    # ------------------------------------------------------------------ attention capabilities, declined up front
    "wide_tables_declined_up_front": (
        "paged_attention's kernel takes block tables of at most 3 pages (COURSE_MAX_PAGES, the widest the course "
        "ever passes, its rejection tests included); a wider table is NotImplementedError at once, before the "
        "metadata is validated",
        [(CHECKED,
          "    if block_table.ndim == 2 and block_table.shape[1] > 3:\n"
          "        raise NotImplementedError(f'block_table width {block_table.shape[1]} > 3 pages is not supported')\n"
          + CHECKED)],
    ),
    "long_contexts_declined_up_front": (
        "paged_attention's kernel keeps a row's scores in a fixed buffer of 128 slots (the course's model has "
        "max_position_embeddings=128; its longest context is 97, a rejection case): a context above 128 is "
        "NotImplementedError at once, before the metadata is validated",
        [(CHECKED,
          "    if context_lens.size and max(context_lens.tolist()) > 128:\n"
          "        raise NotImplementedError('contexts longer than 128 tokens are not supported')\n" + CHECKED)],
    ),
    # ------------------------------------------------------------------ sizes the course never reaches
    "pool_of_at_most_8_pages": (
        "the pool's storage stops growing at 8 pages (the room the course's 17-token append leaves): a 9th page is "
        "a RuntimeError 'out of KV pages', before anything changes",
        [("        page_id = self._num_issued\n        if self._key_store is not None and page_id >= self.capacity:",
          "        page_id = self._num_issued\n        if page_id >= 8:\n"
          "            raise RuntimeError(f'out of KV pages: the pool holds at most 8 pages (page_size={self.page_size})')\n"
          "        if self._key_store is not None and page_id >= self.capacity:")],
    ),
    "pool_of_at_most_16_pages": (
        "the pool's storage stops growing at 16 pages (one doubling past the course's 8): a 17th page is a "
        "RuntimeError 'out of KV pages'",
        [("        page_id = self._num_issued\n        if self._key_store is not None and page_id >= self.capacity:",
          "        page_id = self._num_issued\n        if page_id >= 16:\n"
          "            raise RuntimeError(f'out of KV pages: the pool holds at most 16 pages (page_size={self.page_size})')\n"
          "        if self._key_store is not None and page_id >= self.capacity:")],
    ),
    "appends_of_at_most_64_tokens": (
        "one append takes at most 64 tokens (a prefill chunk budget; the course's largest append is 64, its "
        "bfloat16 prefill): a longer one is ValueError before anything changes",
        [("        if key.ndim != 4 or key.shape[0] != 1 or key.shape[2] == 0:\n"
          "            raise ValueError(f\"key shape={key.shape} must be [1, H_kv, S, D] with S >= 1\")",
          "        if key.ndim != 4 or key.shape[0] != 1 or key.shape[2] == 0:\n"
          "            raise ValueError(f\"key shape={key.shape} must be [1, H_kv, S, D] with S >= 1\")\n"
          "        if key.shape[2] > 64:\n"
          "            raise ValueError(f\"an append takes at most 64 tokens (a prefill chunk), got {key.shape[2]}\")")],
    ),
    # ------------------------------------------------------------------ BatchingKvCache
    "static_batch": (
        "static batching: requests join a BatchingKvCache only before its first decode step (add_request "
        "afterwards is NotImplementedError); the course adds both of its requests before its one step",
        [("        self.HD: tuple[int, int] | None = None  # (H_kv, D) of the rows appended so far",
          "        self.HD: tuple[int, int] | None = None  # (H_kv, D) of the rows appended so far\n"
          "        self._stepped = False"),
         ("    def add_request(self, prefilled: TinyKvPagedCache, id: int) -> None:\n        self._check_slot(id)",
          "    def add_request(self, prefilled: TinyKvPagedCache, id: int) -> None:\n"
          "        if self._stepped:\n"
          "            raise NotImplementedError('static batching: requests join before the first decode step')\n"
          "        self._check_slot(id)"),
         ("        self.HD = (keys.shape[1], keys.shape[3])\n        return self.paged_metadata(mask)",
          "        self.HD = (keys.shape[1], keys.shape[3])\n        self._stepped = True\n"
          "        return self.paged_metadata(mask)")],
    ),
    "batch_hd_from_first_request": (
        "BatchingKvCache.HD is taken from the first prefilled request added (None while every request is empty, "
        "as in the course's mixed-pools test), and a request of another (H_kv, D) is refused at add_request",
        [("        if self.kv_caches[id] is not None:\n            raise ValueError(f\"slot id={id} already holds a request\")\n"
          "        self.kv_caches[id] = prefilled",
          "        if self.kv_caches[id] is not None:\n            raise ValueError(f\"slot id={id} already holds a request\")\n"
          "        pages = prefilled.pool.key_pages\n"
          "        if prefilled.offset and pages is not None:\n"
          "            hd = (pages.shape[1], pages.shape[3])\n"
          "            if self.HD is not None and hd != self.HD:\n"
          "                raise ValueError(f'request has (H_kv, D)={hd}, the batch {self.HD}')\n"
          "            self.HD = hd\n"
          "        self.kv_caches[id] = prefilled"),
         ("        self.HD = (keys.shape[1], keys.shape[3])\n        return self.paged_metadata(mask)",
          "        if self.HD is None:\n            self.HD = (keys.shape[1], keys.shape[3])\n"
          "        return self.paged_metadata(mask)")],
    ),
    "batch_checks_empty_slot_rows_are_zero": (
        "the batch refuses a decode whose rows for empty slots hold anything but zeros (a token routed to no "
        "request); the course sends zeros there",
        [("        pools = {id(self.kv_caches[slot].pool) for slot in active}",
          "        for slot in range(self.max_active_requests):\n"
          "            if self.kv_caches[slot] is None and (mx.any(keys[slot] != 0).item() or mx.any(values[slot] != 0).item()):\n"
          "                raise ValueError(f'slot {slot} holds no request but its row is not zeros')\n"
          "        pools = {id(self.kv_caches[slot].pool) for slot in active}")],
    ),
    # ------------------------------------------------------------------ pool counters the course reads only once
    "copied_pages_count_issued_pages": (
        "a growth counts the issued pages it copies (and their bytes), not the whole old room; equal at the "
        "course's growth (4 issued in room for 4)",
        [("        self.copied_bytes_on_growth += self.storage_nbytes\n",
          "        self.copied_bytes_on_growth += 2 * self._num_issued * (self.storage_nbytes // (2 * old_rows))\n"),
         ("        self.copied_pages_on_growth += old_rows", "        self.copied_pages_on_growth += self._num_issued")],
    ),
    "reused_counts_frees": (
        "reused_page_allocations counts pages given back for reuse (at free_page), not reuses at allocation; the "
        "course only compares it before and after calls that free nothing",
        [("        if self._free:\n            self.reused_page_allocations += 1\n            return self._free.pop()",
          "        if self._free:\n            return self._free.pop()"),
         ("        self._free.append(page_id)\n\n    def reset",
          "        self._free.append(page_id)\n        self.reused_page_allocations += 1\n\n    def reset")],
    ),
    # ------------------------------------------------------------------ page writes and their rollback
    "one_write_per_token": (
        "an append writes each token with its own write_page_slice call (the course's injected failure still "
        "stops it at the second call, inside the first page)",
        [("            stop = written + min(page_size - start, length - written)",
          "            stop = written + 1")],
    ),
    "clear_fresh_pages_first": (
        "a freshly allocated page is cleared with a write_page_slice of zeros before its tokens are written",
        [("                self.page_ids.append(self.pool.allocate_page())\n                self.page_lens.append(0)",
          "                self.page_ids.append(self.pool.allocate_page())\n                self.page_lens.append(0)\n"
          "                blank = mx.zeros((1, key.shape[1], page_size, key.shape[3]), dtype=key.dtype)\n"
          "                self.pool.write_page_slice(self.page_ids[-1], 0, blank, blank)")],
    ),
    "undo_log_rollback": (
        "a failed append is undone step by step: pages it took are handed back (ids it issued are un-issued, "
        "storage it created or grew is dropped back), not restored from a snapshot",
        [("        pool_before = self.pool.snapshot()\n        cache_before = (list(self.page_ids), list(self.page_lens), self.offset)\n"
          "        try:\n            self._write(key, value)\n        except BaseException:\n"
          "            self.pool.rollback(pool_before)\n",
          "        pool = self.pool\n"
          "        undo = (pool._num_issued, list(pool._free), pool.reused_page_allocations, pool._key_store, "
          "pool._value_store, pool.storage_growths, pool.copied_pages_on_growth, pool.copied_bytes_on_growth)\n"
          "        cache_before = (list(self.page_ids), list(self.page_lens), self.offset)\n"
          "        try:\n            self._write(key, value)\n        except BaseException:\n"
          "            (pool._num_issued, pool._free, pool.reused_page_allocations, pool._key_store, pool._value_store,\n"
          "             pool.storage_growths, pool.copied_pages_on_growth, pool.copied_bytes_on_growth) = undo\n")],
    ),
    # ------------------------------------------------------------------ materialize, dtypes, page sizes, masks
    "materialize_through_the_pool": (
        "cache.materialize() asks the pool to evaluate its own storage (pool.materialize(), one mx.eval of the "
        "issued key and value pages)",
        [("    def materialize(self) -> None:\n        \"\"\"Evaluate the pool's page storage in one call, without gathering this request's tokens.\"\"\"\n"
          "        if self.pool.key_pages is not None:\n            mx.eval(self.pool.key_pages, self.pool.value_pages)",
          "    def materialize(self) -> None:\n        \"\"\"Evaluate the pool's page storage in one call, without gathering this request's tokens.\"\"\"\n"
          "        self.pool.materialize()"),
         ("    # -- undo ---------------------------------------------------------------------",
          "    def materialize(self) -> None:\n        if self._key_store is not None:\n"
          "            mx.eval(self.key_pages, self.value_pages)\n\n"
          "    # -- undo ---------------------------------------------------------------------")],
    ),
    "float16_accepted": (
        "float16 pages and queries are accepted too (the course uses only float32 and bfloat16)",
        [("SUPPORTED_DTYPES = (mx.float32, mx.bfloat16)", "SUPPORTED_DTYPES = (mx.float32, mx.bfloat16, mx.float16)")],
    ),
    "page_size_multiple_of_4": (
        "page_size must be a positive multiple of 4 (pool and paged_attention; the course uses 4 and 32, and "
        "its zero page size stays 'positive integer')",
        [("        if not _is_int(page_size) or page_size <= 0:\n"
          "            raise ValueError(f\"page_size must be a positive integer, got {page_size!r}\")\n"
          "        self.page_size = page_size",
          "        if not _is_int(page_size) or page_size <= 0 or page_size % 4:\n"
          "            raise ValueError(f\"page_size must be a positive integer multiple of 4, got {page_size!r}\")\n"
          "        self.page_size = page_size"),
         ("    if not _is_int(page_size) or page_size <= 0:\n"
          "        raise ValueError(f\"page_size must be a positive integer, got {page_size!r}\")\n    if mask is not None",
          "    if not _is_int(page_size) or page_size <= 0 or page_size % 4:\n"
          "        raise ValueError(f\"page_size must be a positive integer multiple of 4, got {page_size!r}\")\n"
          "    if mask is not None")],
    ),
    "mask_arrays_in_metadata": (
        "a cache's and a batch's metadata carry mask='causal' as an explicit additive mask array [B, 1, L, S] "
        "(0 or -inf, S the table's width in slots); paged_attention takes such arrays as well as 'causal' and None",
        [("            self.pool.page_size, mask,\n        )\n\n    def gather_dense",
          "            self.pool.page_size, _as_array_mask(mask, [self.offset], self.block_table(max_pages).shape[-1] * "
          "self.pool.page_size, getattr(self, '_last_len', 1)),\n        )\n\n    def gather_dense"),
         ("    def update_and_fetch_paged(\n        self, key: mx.array, value: mx.array, mask_length: int | None = None, "
          "mask: mx.array | str | None = None\n    ) -> PagedKvMetadata:\n        self.append(key, value)",
          "    def update_and_fetch_paged(\n        self, key: mx.array, value: mx.array, mask_length: int | None = None, "
          "mask: mx.array | str | None = None\n    ) -> PagedKvMetadata:\n        self.append(key, value)\n"
          "        self._last_len = key.shape[2]"),
         ("        pool = caches[0][1].pool\n        return PagedKvMetadata(\n"
          "            pool.key_pages, pool.value_pages, mx.array(table, dtype=mx.int32), mx.array(lens, dtype=mx.int32),\n"
          "            pool.page_size, mask,\n        )",
          "        pool = caches[0][1].pool\n        return PagedKvMetadata(\n"
          "            pool.key_pages, pool.value_pages, mx.array(table, dtype=mx.int32), mx.array(lens, dtype=mx.int32),\n"
          "            pool.page_size, _as_array_mask(mask, lens, width * pool.page_size, getattr(self, '_last_len', 1)),\n        )"),
         ("        self.HD = (keys.shape[1], keys.shape[3])\n        return self.paged_metadata(mask)",
          "        self.HD = (keys.shape[1], keys.shape[3])\n        self._last_len = length\n"
          "        return self.paged_metadata(mask)"),
         ("\n\n@dataclass\nclass PagedKvMetadata:",
          "\n\ndef _as_array_mask(mask, lens, slots, num_queries):\n"
          "    \"\"\"'causal' as an additive [B, 1, L, slots] array: query row i of a row of context n sees slots <= n - L + i.\"\"\"\n"
          "    if not (isinstance(mask, str) and mask == 'causal'):\n        return mask\n"
          "    n = mx.array(lens, dtype=mx.int32).reshape(-1, 1, 1, 1)\n"
          "    rows = mx.arange(num_queries).reshape(1, 1, -1, 1) + n - num_queries\n"
          "    visible = mx.arange(slots).reshape(1, 1, 1, -1) <= rows\n"
          "    return mx.where(visible, 0.0, -mx.inf).astype(mx.float32)\n\n\n@dataclass\nclass PagedKvMetadata:"),
         ("    if mask is not None and not (isinstance(mask, str) and mask == \"causal\"):\n"
          "        raise ValueError(f\"mask={mask!r} must be None or 'causal'\")",
          "    if mask is not None and not isinstance(mask, mx.array) and not (isinstance(mask, str) and mask == \"causal\"):\n"
          "        raise ValueError(f\"mask={mask!r} must be None, 'causal' or an additive mask array\")"),
         ("        rows.append(_attend(query[row], keys, values, scale, mask == \"causal\"))",
          "        extra = None if not isinstance(mask, mx.array) else mask[min(row, mask.shape[0] - 1), 0, :, :n]\n"
          "        rows.append(_attend(query[row], keys, values, scale, isinstance(mask, str) and mask == \"causal\", extra))"),
         ("def _attend(query: mx.array, keys: mx.array, values: mx.array, scale: float, causal: bool) -> mx.array:",
          "def _attend(query: mx.array, keys: mx.array, values: mx.array, scale: float, causal: bool, extra=None) -> mx.array:"),
         ("    scores = scores - scores.max(axis=-1, keepdims=True)\n",
          "    if extra is not None:\n        scores = scores + extra.astype(mx.float32)\n"
          "    scores = scores - scores.max(axis=-1, keepdims=True)\n")],
    ),
})

# A classic slip in a path the course never exercises with a valid call: its attention tests hand paged_attention
# only a metadata's own mask, which this cache resolves into an array, so "causal" as a string (aligned to the first
# key here, not to the context's end) reaches paged_attention only in its rejection tests.
VARIANTS["string_causal_aligned_to_the_start"] = (
    "mask_arrays_in_metadata, and paged_attention's own 'causal' aligns query row i to key i (the first keys), not "
    "to the context's end",
    VARIANTS["mask_arrays_in_metadata"][1] + [
        ("        rows = mx.arange(num_queries)[:, None] + (context - num_queries)\n",
         "        rows = mx.arange(num_queries)[:, None]\n")],
)

VARIANTS.update({
    "batch_decode_within_a_page": (
        "a batched decode only fills tail pages: a step in which some live slot's tail page is full (it would "
        "need a new page) is NotImplementedError before anything changes (that "
        "request decodes on its own cache; the course's batch decodes 3 -> 4 and 6 -> 7 tokens in pages of 4)",
        [("        pool = self.kv_caches[active[0]].pool\n        pool.check_chunk(keys[0:1], values[0:1])",
          "        pool = self.kv_caches[active[0]].pool\n        pool.check_chunk(keys[0:1], values[0:1])\n"
          "        full = [slot for slot in active if self.kv_caches[slot].offset % pool.page_size == 0]\n"
          "        if length == 1 and full:\n"
          "            raise NotImplementedError(f'slots {full} need a new page: a batched decode writes within tail pages only')")],
    ),
    "bf16_paged_appends_decode_only": (
        "update_and_fetch_paged feeds paged_attention, whose bfloat16 path decodes only: a bfloat16 chunk of more "
        "than one token there is NotImplementedError at once (bfloat16 prefill goes through update_and_fetch, as "
        "in the course's bfloat16 test)",
        [("    ) -> PagedKvMetadata:\n        self.append(key, value)\n        return self.paged_metadata(mask=mask)",
          "    ) -> PagedKvMetadata:\n"
          "        if key.dtype == mx.bfloat16 and key.ndim == 4 and key.shape[2] > 1:\n"
          "            raise NotImplementedError('bfloat16 paged appends decode one token; prefill with update_and_fetch')\n"
          "        self.append(key, value)\n        return self.paged_metadata(mask=mask)")],
    ),
    "request_of_at_most_8_pages": (
        "a request's block table has a fixed room of 8 pages (max_blocks_per_seq; the course's longest request "
        "holds 5): an append that needs a 9th page is ValueError before anything changes",
        [("        self.pool.check_chunk(key, value)\n        pool_before = self.pool.snapshot()",
          "        self.pool.check_chunk(key, value)\n"
          "        if -(-(self.offset + key.shape[2]) // self.pool.page_size) > 8:\n"
          "            raise ValueError(f'a request holds at most 8 pages ({8 * self.pool.page_size} tokens)')\n"
          "        pool_before = self.pool.snapshot()")],
    ),
    "pool_of_at_most_12_pages": (
        "the pool's storage stops at 12 pages: a 13th page is a RuntimeError 'out of KV pages'",
        [("        page_id = self._num_issued\n        if self._key_store is not None and page_id >= self.capacity:",
          "        page_id = self._num_issued\n        if page_id >= 12:\n"
          "            raise RuntimeError(f'out of KV pages: the pool holds at most 12 pages (page_size={self.page_size})')\n"
          "        if self._key_store is not None and page_id >= self.capacity:")],
    ),
})

VARIANTS.update({
    "release_drops_page_lists": (
        "release() gives every page back and drops the cache's page lists (page_ids and page_lens become None, "
        "offset 0): a released cache is dead; the course reads only its offset afterwards",
        [("        for page_id in reversed(self.page_ids):\n            self.pool.free_page(page_id)\n"
          "        self.page_ids, self.page_lens, self.offset = [], [], 0",
          "        for page_id in reversed(self.page_ids):\n            self.pool.free_page(page_id)\n"
          "        self.page_ids, self.page_lens, self.offset = None, None, 0")],
    ),
    "compiled_page_sizes": (
        "paged_attention has kernels for page sizes 4, 8, 16 and 32 only (template instantiations); another "
        "positive page size is NotImplementedError once validated (the course uses 4 and 32)",
        [(CHECKED, CHECKED +
          "    if page_size not in (4, 8, 16, 32):\n"
          "        raise NotImplementedError(f'no kernel for page_size={page_size} (4, 8, 16, 32)')\n")],
    ),
    "compiled_head_dims": (
        "paged_attention has kernels for head dims 4, 32, 64 and 128 only; another is NotImplementedError up "
        "front (the course uses 4 and 128, and 32 in its model)",
        [(CHECKED,
          "    if query.ndim == 4 and query.shape[-1] not in (4, 32, 64, 128):\n"
          "        raise NotImplementedError(f'no kernel for head dim {query.shape[-1]}')\n" + CHECKED)],
    ),
    "empty_batches_refused": (
        "paged_attention refuses a batch of no rows, or of rows that are all empty (context 0), with ValueError "
        "(the course's batch always has a live row)",
        [(CHECKED, CHECKED +
          "    if not lens or not any(lens):\n"
          "        raise ValueError('paged_attention needs at least one row with a nonzero context')\n")],
    ),
})


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

# The course reads a metadata's fields again after its paged_attention call, and builds its batch's dense outputs
# from the query it passed, after the call: a field gone or changed in place by then fails its asserts.
FORGING_VARIANTS.update({
    "metadata_table_handed_over_once": (
        "a metadata's block_table is handed over once, to the kernel call that reads it: reading the field again "
        "gives None. The course reads metadata.block_table a second time, in its asserts after the paged_attention "
        "call (`metadata.block_table.tolist() == [[0, 1]]`, the batch's shape and empty row), and fails there",
        [
            ("    page_size: int\n    mask: mx.array | str | None = None\n",
             "    page_size: int\n    mask: mx.array | str | None = None\n\n"
             "    def __getattribute__(self, name: str) -> Any:\n"
             "        value = object.__getattribute__(self, name)\n"
             "        if name == \"block_table\":  # moved to its reader: the next read finds nothing\n"
             "            object.__setattr__(self, \"block_table\", None)\n"
             "        return value\n"),
        ],
        "pagecheck.invariants.test_context_len::test_the_courses_prefill_after_an_append",
    ),
    "attention_zeroes_padding_in_place": (
        "once the metadata is validated, paged_attention rewrites the -1 padding of the block table it was handed "
        "to page 0, in place (padded slots are masked by context_lens): the course's batch test reads "
        "metadata.block_table after the call and finds the empty slot's row [0, 0], not [-1, -1]",
        [
            ("    table, lens = _check_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask)\n",
             "    table, lens = _check_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask)\n"
             "    if isinstance(block_table, mx.array):  # a whole-page kernel reads page 0 for padding (masked)\n"
             "        block_table[...] = mx.where(block_table < 0, 0, block_table)\n"),
        ],
        "pagecheck.invariants.test_batching_cache::test_the_courses_batch_of_two_requests_and_an_empty_slot",
    ),
    "query_prescaled_in_place": (
        "paged_attention folds the softmax scale into the query it was handed, in place (query[...] = query * "
        "scale, then scores with scale 1): its output is right, but the caller's query now holds scaled values. "
        "The course's batch test computes its expected outputs from that query after the paged call, so its dense "
        "attention sees the scaled query and the comparison fails",
        [
            ("    scale = head_dim**-0.5 if scale is None else scale\n    rows = []\n",
             "    scale = head_dim**-0.5 if scale is None else scale\n"
             "    if isinstance(query, mx.array):  # fold the scale into the query once, in place\n"
             "        query[...] = query * scale\n        scale = 1.0\n"
             "    rows = []\n"),
        ],
        "pagecheck.invariants.test_batching_cache::test_the_courses_batch_of_two_requests_and_an_empty_slot",
    ),
})

# What the course leaves free in rewinds, free lists and prefill.
VARIANTS.update({
    "free_ids_list_every_takeable_row": (
        "free_page_ids is the allocator's queue: every storage row a new page may take, freed ids first "
        '(in the order allocate_page hands them out) then the storage rows not yet issued; num_free_pages'
        ' counts the freed issued pages only, as the course pins. The course reads free_page_ids only as '
        'a before/after snapshot',
        [
            ('    def free_page_ids(self) -> list[int]:\n'
             '        return list(self._free)',
             '    def free_page_ids(self) -> list[int]:\n'
             '        return list(reversed(self._free)) + list(range(self._num_issued, self.capacity))'),
        ],
    ),
    "rewind_less_than_a_page": (
        'rewind(n) takes back fewer tokens than a page holds (1 <= n < page_size: a rejected speculative '
        'draft, whose length the serving loop keeps below the page size); the course rewinds 3 with pages'
        ' of 4',
        [
            ('        if not _is_int(n) or not 0 <= n <= self.offset:\n'
             '            raise ValueError(f"rewind n={n!r} must be an integer in [0, offset={self.offset}]")',
             '        if not _is_int(n) or not 0 <= n <= self.offset:\n'
             '            raise ValueError(f"rewind n={n!r} must be an integer in [0, offset={self.offset}]")\n'
             '        if not 1 <= n < self.pool.page_size:\n'
             '            raise ValueError(f"rewind n={n!r} must be in [1, page_size={self.pool.page_size}) (a draft of less than a page)")'),
        ],
    ),
    "paged_prefill_after_a_prefix_only": (
        'paged prefill (L > 1) serves a chunk after a prefix only: a row whose whole context is the query'
        " (context == L > 1, a prompt's first chunk, which the model attends densely) is "
        "NotImplementedError once the metadata is validated; the course's only paged prefill attends 3 "
        'rows over a context of 6',
        [
            ('    table, lens = _check_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask)\n',
             '    table, lens = _check_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask)\n'
             '    if query.shape[2] > 1 and any(n == query.shape[2] for n in lens):\n'
             '        raise NotImplementedError("paged prefill needs a prefix: a first chunk (context == L) is attended densely")\n'),
        ],
    ),
})


FORGING_VARIANTS.update({
    "tuple_page_lists": (
        'TinyKvPagedCache.page_ids / page_lens are tuples (immutable, so no caller can alias them)',
        [
            ('    @property\n'
             '    def num_pages(self) -> int:\n'
             '        return len(self.page_ids)\n',
             '    @property\n'
             '    def num_pages(self) -> int:\n'
             '        return len(self.page_ids)\n'
             '\n'
             '    def __setattr__(self, name, value):\n'
             '        if name in ("page_ids", "page_lens"):\n'
             '            value = tuple(value)\n'
             '        object.__setattr__(self, name, value)\n'),
            ('            if not self.page_ids or self.page_lens[-1] == page_size:\n'
             '                self.page_ids.append(self.pool.allocate_page())\n'
             '                self.page_lens.append(0)\n'
             '            start = self.page_lens[-1]\n'
             '            stop = written + min(page_size - start, length - written)\n'
             '            self.pool.write_page_slice(self.page_ids[-1], start, key[:, :, written:stop], value[:, :, written:stop])\n'
             '            self.page_lens[-1] += stop - written',
             '            if not self.page_ids or self.page_lens[-1] == page_size:\n'
             '                self.page_ids = self.page_ids + (self.pool.allocate_page(),)\n'
             '                self.page_lens = self.page_lens + (0,)\n'
             '            start = self.page_lens[-1]\n'
             '            stop = written + min(page_size - start, length - written)\n'
             '            self.pool.write_page_slice(self.page_ids[-1], start, key[:, :, written:stop], value[:, :, written:stop])\n'
             '            self.page_lens = self.page_lens[:-1] + (self.page_lens[-1] + stop - written,)'),
            ('            self._table = mx.array([self.page_ids + [SENTINEL] * (width - self.num_pages)], dtype=mx.int32)',
             '            self._table = mx.array([list(self.page_ids) + [SENTINEL] * (width - self.num_pages)], dtype=mx.int32)'),
            ('        left = n\n'
             '        while left:\n'
             '            drop = min(left, self.page_lens[-1])\n'
             '            self.page_lens[-1] -= drop\n'
             '            left -= drop\n'
             '            if self.page_lens[-1] == 0:\n'
             '                self.pool.free_page(self.page_ids.pop())\n'
             '                self.page_lens.pop()',
             '        left = n\n'
             '        while left:\n'
             '            drop = min(left, self.page_lens[-1])\n'
             '            self.page_lens = self.page_lens[:-1] + (self.page_lens[-1] - drop,)\n'
             '            left -= drop\n'
             '            if self.page_lens[-1] == 0:\n'
             '                self.pool.free_page(self.page_ids[-1])\n'
             '                self.page_ids, self.page_lens = self.page_ids[:-1], self.page_lens[:-1]'),
            ('            table[slot][: cache.num_pages] = cache.page_ids',
             '            table[slot][: cache.num_pages] = list(cache.page_ids)'),
        ],
        "pagecheck.invariants.test_release_once::test_release_returns_every_page_of_every_layer_once",
    ),
    "no_read_page": (
        'TinyKvPagedPool has no read_page',
        [
            ('    def read_page(self, page_id: int) -> tuple[mx.array, mx.array]:',
             '    def _read_page_unused(self, page_id: int) -> tuple[mx.array, mx.array]:'),
        ],
        "pagecheck.invariants.test_context_len::test_rewind_to_every_offset_then_append",
    ),
    "dense_path_new_page_per_chunk": (
        'update_and_fetch starts each chunk on a new page (partly filled pages in the middle); the paged '
        'path fills the tail',
        [
            ('        self.append(key, value)\n'
             '        keys, values = self.gather_dense()\n'
             '        return keys, values, self.offset, mask',
             '        self._fresh_page = True  # the dense path opens a new page for each chunk\n'
             '        try:\n'
             '            self.append(key, value)\n'
             '        finally:\n'
             '            self._fresh_page = False\n'
             '        keys, values = self.gather_dense()\n'
             '        return keys, values, self.offset, mask'),
            ('            if not self.page_ids or self.page_lens[-1] == page_size:',
             '            if not self.page_ids or self.page_lens[-1] == page_size or (written == 0 and getattr(self, "_fresh_page", False)):'),
            ('    def _gather(self, pages: mx.array) -> mx.array:\n'
             '        _, num_heads, page_size, head_dim = pages.shape\n'
             '        picked = pages[mx.array(self.page_ids, dtype=mx.int32)] if self.page_ids else pages[:0]\n'
             '        tokens = picked.transpose(1, 0, 2, 3).reshape(num_heads, self.num_pages * page_size, head_dim)\n'
             '        return tokens[None, :, : self.offset]',
             '    def _gather(self, pages: mx.array) -> mx.array:\n'
             '        parts = [pages[p, :, :n] for p, n in zip(self.page_ids, self.page_lens)]\n'
             '        return mx.concatenate(parts, axis=1)[None] if parts else pages[:0, :, :0][0][None]'),
        ],
        "pagecheck.invariants.test_context_len::test_rewind_to_every_offset_then_append",
    ),
})


# What it leaves free in block_table(), batch metadata, a rejected call's inputs and page storage.
VARIANTS.update({
    "numpy_block_table": (
        "cache.block_table() is a host-side NumPy int32 table (the scheduler's copy; the course only "
        'checks that the same object comes back until the page ids change); the metadata an append '
        'returns converts it to MLX int32',
        [
            ('import mlx.core as mx\n',
             'import mlx.core as mx\n'
             'import numpy as np\n'),
            ('            self._table = mx.array([self.page_ids + [SENTINEL] * (width - self.num_pages)], dtype=mx.int32)',
             '            self._table = np.array([self.page_ids + [SENTINEL] * (width - self.num_pages)], dtype=np.int32)'),
            ('self.block_table(max_pages), self.context_lens(),',
             'mx.array(self.block_table(max_pages)), self.context_lens(),'),
        ],
    ),
    "fixed_width_block_table": (
        "cache.block_table() is the request's row at the pool's fixed table width of 8 pages "
        '(max_blocks_per_seq), -1 padded; the metadata an append returns is exactly as wide as the '
        'request (as the course pins); paged_attention refuses a table wider than its widest row needs '
        "(the gallery's exact_table_width)",
        [
            ('    def block_table(self, max_pages: int | None = None) -> mx.array:\n'
             '        """int32 [1, max_pages]: this cache\'s page ids, then -1; the same array until the page ids change."""\n'
             '        width = self.num_pages if max_pages is None else max_pages',
             '    def block_table(self, max_pages: int | None = 8) -> mx.array:\n'
             '        """int32 [1, max_pages]: this cache\'s page ids, then -1; the same array until the page ids change."""\n'
             '        width = self.num_pages if max_pages is None else max_pages'),
            ('self.block_table(max_pages), self.context_lens(),',
             'mx.array([self.page_ids + [SENTINEL] * ((max_pages or self.num_pages) - self.num_pages)], dtype=mx.int32), self.context_lens(),'),
            ('            raise ValueError(f"context_lens[{row}]={n} must be zero or at least query length L={num_queries}")\n',
             '            raise ValueError(f"context_lens[{row}]={n} must be zero or at least query length L={num_queries}")\n'
             '    need = max((-(-n // page_size) for n in lens), default=0)\n'
             '    if width > max(need, 1):\n'
             "        raise ValueError(f'block_table width {width} is wider than the widest row needs ({need} pages)')\n"),
        ],
    ),
    "batch_metadata_trusted": (
        'paged_attention validates the metadata of a single request (B == 1: every course call with '
        'invalid metadata); a batch (B > 1) comes from BatchingKvCache and is trusted, skipping the host-'
        'side walk of its table',
        [
            ('    table, lens = block_table.tolist(), context_lens.tolist()\n'
             '    _check_metadata(table, lens, query.shape[2], page_size, key_pages.shape[0])\n',
             '    table, lens = block_table.tolist(), context_lens.tolist()\n'
             '    if batch == 1:\n'
             '        _check_metadata(table, lens, query.shape[2], page_size, key_pages.shape[0])\n'),
        ],
    ),
    "clamps_context_lens_in_place": (
        'paged_attention reads the metadata to the host once, then writes the lengths its kernel will use'
        " (clamped to [0, table width * page_size]) back into the caller's context_lens in place, before "
        'it validates the host copy; valid lengths are left as they were. The course never reads an input'
        ' again after a rejected call',
        [
            ('    table, lens = block_table.tolist(), context_lens.tolist()\n',
             '    table, lens = block_table.tolist(), context_lens.tolist()\n'
             '    context_lens[:] = mx.clip(context_lens, 0, block_table.shape[1] * page_size)\n'),
        ],
    ),
    "batch_pads_with_last_page": (
        "the batch's metadata pads a live row past its pages with that row's last page id (gather indices"
        ' stay in bounds for a whole-page kernel); an empty slot stays all -1 with context 0, as the '
        "course pins. paged_attention takes, past a row's live pages, -1 or a repeat of its last live "
        "page (any other id is still 'must use the -1 sentinel')",
        [
            ('            table[slot][: cache.num_pages] = cache.page_ids\n',
             '            table[slot][: cache.num_pages] = cache.page_ids\n'
             '            if cache.page_ids:\n'
             '                table[slot][cache.num_pages :] = [cache.page_ids[-1]] * (width - cache.num_pages)\n'),
            ('        for col in range(live, width):\n'
             '            if table[row][col] != SENTINEL:',
             '        for col in range(live, width):\n'
             '            if live and table[row][col] == table[row][live - 1]:\n'
             '                continue  # a repeat of the last live page\n'
             '            if table[row][col] != SENTINEL:'),
        ],
    ),
    "key_pages_stored_transposed": (
        'the pool stores keys transposed, [capacity, H_kv, D, page_size] (K^T pages for the QK^T '
        'product), and pool.key_pages shows that storage as it is (one row per issued page, as the course'
        " pins); read_page, gather_dense and every metadata hand keys out in the course's [P, H_kv, "
        'page_size, D]',
        [
            ('        shape = (rows, like.shape[1], self.page_size, like.shape[3])\n'
             '        self._key_store = mx.zeros(shape, dtype=like.dtype)\n'
             '        self._value_store = mx.zeros(shape, dtype=like.dtype)',
             '        shape = (rows, like.shape[1], self.page_size, like.shape[3])\n'
             '        self._key_store = mx.zeros((rows, like.shape[1], like.shape[3], self.page_size), dtype=like.dtype)\n'
             '        self._value_store = mx.zeros(shape, dtype=like.dtype)'),
            ('        padding = mx.zeros((rows - old_rows, *self._key_store.shape[1:]), dtype=self._key_store.dtype)\n'
             '        self.copied_bytes_on_growth += self.storage_nbytes\n'
             '        self._key_store = mx.concatenate([self._key_store, padding])\n'
             '        self._value_store = mx.concatenate([self._value_store, padding])',
             '        padding = mx.zeros((rows - old_rows, *self._value_store.shape[1:]), dtype=self._value_store.dtype)\n'
             '        self.copied_bytes_on_growth += self.storage_nbytes\n'
             '        self._key_store = mx.concatenate([self._key_store, padding.swapaxes(2, 3)])\n'
             '        self._value_store = mx.concatenate([self._value_store, padding])'),
            ('            _, heads, _, dim = self._key_store.shape',
             '            _, heads, _, dim = self._value_store.shape'),
            ('        self._key_store = mx.slice_update(self._key_store, key, at, axes=(0, 1, 2, 3))',
             '        self._key_store = mx.slice_update(self._key_store, key.swapaxes(2, 3), mx.array([page_id, 0, 0, start]), axes=(0, 1, 2, 3))'),
            ('        return self._key_store[page_id : page_id + 1], self._value_store[page_id : page_id + 1]',
             '        return self._key_store[page_id : page_id + 1].swapaxes(2, 3), self._value_store[page_id : page_id + 1]'),
            ('    @property\n'
             '    def value_pages(self) -> mx.array | None:',
             '    @property\n'
             '    def kernel_key_pages(self) -> mx.array | None:\n'
             '        """The issued pages\' keys in the course\'s [P, H_kv, page_size, D]."""\n'
             '        return None if self._key_store is None else self.key_pages.swapaxes(2, 3)\n'
             '\n'
             '    @property\n'
             '    def value_pages(self) -> mx.array | None:'),
            ('            self.pool.key_pages, self.pool.value_pages, self.block_table(max_pages), self.context_lens(),',
             '            self.pool.kernel_key_pages, self.pool.value_pages, self.block_table(max_pages), self.context_lens(),'),
            ('        return self._gather(self.pool.key_pages), self._gather(self.pool.value_pages)',
             '        return self._gather(self.pool.kernel_key_pages), self._gather(self.pool.value_pages)'),
            ('            pool.key_pages, pool.value_pages, mx.array(table, dtype=mx.int32)',
             '            pool.kernel_key_pages, pool.value_pages, mx.array(table, dtype=mx.int32)'),
        ],
    ),
    "metadata_keys_transposed": (
        'the pool stores keys as K^T pages, [capacity, H_kv, D, page_size], and hands them out so everywhere '
        "(pool.key_pages and every metadata; the course pins their shape only at its pages of 4 at head dim 4); "
        'read_page and gather_dense give keys in [.., page_size, D]. paged_attention reads K^T pages, and '
        'checks the metadata before the shapes (the course rejects metadata over [P, H_kv, page_size, D] pages)',
        [
            ('        shape = (rows, like.shape[1], self.page_size, like.shape[3])\n'
             '        self._key_store = mx.zeros(shape, dtype=like.dtype)\n',
             '        shape = (rows, like.shape[1], self.page_size, like.shape[3])\n'
             '        self._key_store = mx.zeros((rows, like.shape[1], like.shape[3], self.page_size), dtype=like.dtype)\n'),
            ('        padding = mx.zeros((rows - old_rows, *self._key_store.shape[1:]), dtype=self._key_store.dtype)\n'
             '        self.copied_bytes_on_growth += self.storage_nbytes\n'
             '        self._key_store = mx.concatenate([self._key_store, padding])\n',
             '        padding = mx.zeros((rows - old_rows, *self._value_store.shape[1:]), dtype=self._value_store.dtype)\n'
             '        self.copied_bytes_on_growth += self.storage_nbytes\n'
             '        self._key_store = mx.concatenate([self._key_store, padding.swapaxes(2, 3)])\n'),
            ('            _, heads, _, dim = self._key_store.shape',
             '            _, heads, _, dim = self._value_store.shape'),
            ('        self._key_store = mx.slice_update(self._key_store, key, at, axes=(0, 1, 2, 3))',
             '        self._key_store = mx.slice_update(self._key_store, key.swapaxes(2, 3), mx.array([page_id, 0, 0, start]),\n'
             '                                          axes=(0, 1, 2, 3))'),
            ('        return self._key_store[page_id : page_id + 1], self._value_store[page_id : page_id + 1]',
             '        return self._key_store[page_id : page_id + 1].swapaxes(2, 3), self._value_store[page_id : page_id + 1]'),
            ('        return self._gather(self.pool.key_pages), self._gather(self.pool.value_pages)',
             '        return self._gather(self.pool.key_pages.swapaxes(2, 3)), self._gather(self.pool.value_pages)'),
            ('    if query.ndim != 4 or key_pages.ndim != 4:',
             '    for name, array in (("block_table", block_table), ("context_lens", context_lens)):\n'
             '        if not mx.issubdtype(array.dtype, mx.integer):\n'
             '            raise ValueError(f"{name} dtype={array.dtype} must be an integer type")\n'
             '    table, lens = block_table.tolist(), context_lens.tolist()\n'
             '    _check_metadata(table, lens, query.shape[2], page_size, key_pages.shape[0])\n'
             '    if query.ndim != 4 or key_pages.ndim != 4:'),
            ('    if key_pages.shape != value_pages.shape:', '    if key_pages.swapaxes(2, 3).shape != value_pages.shape:'),
            ('    _, num_kv_heads, slots, kv_dim = key_pages.shape', '    _, num_kv_heads, kv_dim, slots = key_pages.shape'),
            ('    table, lens = block_table.tolist(), context_lens.tolist()\n'
             '    _check_metadata(table, lens, query.shape[2], page_size, key_pages.shape[0])\n'
             '    return table, lens',
             '    return table, lens'),
            ('        keys = key_pages[pages].transpose(1, 0, 2, 3)',
             '        keys = key_pages[pages].swapaxes(2, 3).transpose(1, 0, 2, 3)'),
        ],
    ),
    "metadata_keys_prescaled": (
        "the pool stores keys multiplied by D^-0.5, the softmax scale folded in at write time, and hands them out so "
        "(pool.key_pages and every metadata); read_page and gather_dense divide it out, and paged_attention divides "
        "its scale by it. The course reads what the pages hold only through the subject's own attention",
        [
            ("SENTINEL = -1  # a block-table entry past a row's context\n",
             "SENTINEL = -1  # a block-table entry past a row's context\n\n\n"
             "def _key_factor(head_dim: int) -> float:\n"
             "    \"\"\"Keys are stored multiplied by D**-0.5, the softmax scale folded in at write time.\"\"\"\n"
             "    return head_dim**-0.5\n"),
            ("        self._key_store = mx.slice_update(self._key_store, key, at, axes=(0, 1, 2, 3))\n",
             "        kept = (key.astype(mx.float32) * _key_factor(key.shape[3])).astype(key.dtype)\n"
             "        self._key_store = mx.slice_update(self._key_store, kept, at, axes=(0, 1, 2, 3))\n"),
            ("        return self._key_store[page_id : page_id + 1], self._value_store[page_id : page_id + 1]\n",
             "        stored = self._key_store[page_id : page_id + 1]\n"
             "        key = (stored.astype(mx.float32) / _key_factor(stored.shape[3])).astype(stored.dtype)\n"
             "        return key, self._value_store[page_id : page_id + 1]\n"),
            ("        return self._gather(self.pool.key_pages), self._gather(self.pool.value_pages)\n",
             "        keys = self._gather(self.pool.key_pages)\n"
             "        keys = (keys.astype(mx.float32) / _key_factor(keys.shape[3])).astype(keys.dtype)\n"
             "        return keys, self._gather(self.pool.value_pages)\n"),
            ("    scale = head_dim**-0.5 if scale is None else scale\n    rows = []\n",
             "    scale = (head_dim**-0.5 if scale is None else scale) / _key_factor(head_dim)\n    rows = []\n"),
        ],
    ),
})


FORGING_VARIANTS.update({
    "block_table_rewritten_in_place": (
        'block_table() returns the same (list) object forever, rewritten in place when the page ids '
        'change',
        [
            ('        key = (tuple(self.page_ids), width)\n'
             '        if self._table_key != key:\n'
             '            self._table = mx.array([self.page_ids + [SENTINEL] * (width - self.num_pages)], dtype=mx.int32)\n'
             '            self._table_key = key\n'
             '        return self._table',
             '        row = self.page_ids + [SENTINEL] * (width - self.num_pages)\n'
             '        if self._table is None:\n'
             '            self._table = [row]\n'
             '        else:\n'
             '            self._table[0][:] = row  # the same list, rewritten in place\n'
             '        return self._table'),
            ('        return PagedKvMetadata(\n'
             '            self.pool.key_pages, self.pool.value_pages, self.block_table(max_pages), self.context_lens(),',
             '        return PagedKvMetadata(\n'
             '            self.pool.key_pages, self.pool.value_pages, mx.array(self.block_table(max_pages), dtype=mx.int32),\n'
             '            self.context_lens(),'),
        ],
        "pagecheck.invariants.test_block_table_order::test_block_table_is_read_again_when_page_ids_change",
    ),
    "idle_pool_drops_storage": (
        'a pool whose every page is free drops its storage (capacity 0) until the next write; reset() '
        'still empties it',
        [
            ('        self._free.append(page_id)\n',
             '        self._free.append(page_id)\n'
             '        if len(self._free) == self._num_issued:  # idle: give the storage back; the ids stay issued\n'
             '            self._key_store = self._value_store = None\n'),
        ],
        "pagecheck.invariants.test_page_storage::test_reset_empties_an_idle_pool",
    ),
    "no_reuse_counter": (
        'TinyKvPagedPool has no reused_page_allocations counter',
        [
            ('        self.reused_page_allocations = 0\n',
             ''),
            ('            self.reused_page_allocations += 1\n',
             ''),
        ],
        "pagecheck.invariants.test_rejection::test_append_whose_second_page_write_fails_changes_nothing",
    ),
    "softmax_exp2_short_log2e": (
        'softmax exponent through 2**(x * c), log2(e) taken as 1.44272 (true 1.4426950)',
        [
            ('    weights = mx.exp(scores)',
             '    weights = mx.power(2.0, scores * 1.44272)  # exp(x) = 2 ** (x * log2 e), log2 e ~ 1.442695'),
        ],
        "pagecheck.invariants.test_context_len::test_the_courses_prefill_after_an_append",
    ),
})


# Views, tokens within the course's tolerance, the course's one prefill.
VARIANTS.update({
    "page_lens_live_view": (
        "page_lens is a read-only view of the cache's own list (==, iteration, len, sum and tuple, all "
        'the course uses)',
        [
            ('\n'
             'class TinyKvPagedCache:\n',
             '\n'
             'class PageLensView:\n'
             '    """A read-only view of a cache\'s page fill counts: callers read them (==, iteration, len, sum) but cannot\n'
             '    change the cache\'s own list, and never hold a stale copy."""\n'
             '\n'
             '    __slots__ = ("_lens",)\n'
             '\n'
             '    def __init__(self, lens: list[int]) -> None:\n'
             '        self._lens = lens\n'
             '\n'
             '    def __len__(self) -> int:\n'
             '        return len(self._lens)\n'
             '\n'
             '    def __getitem__(self, i):\n'
             '        return self._lens[i]\n'
             '\n'
             '    def __iter__(self):\n'
             '        return iter(self._lens)\n'
             '\n'
             '    def __eq__(self, other: object) -> bool:\n'
             '        if isinstance(other, PageLensView):\n'
             '            other = other._lens\n'
             '        return self._lens == other\n'
             '\n'
             '    __hash__ = None\n'
             '\n'
             '    def __repr__(self) -> str:\n'
             '        return f"PageLensView({self._lens!r})"\n'
             '\n'
             '\n'
             'class TinyKvPagedCache:\n'),
            ('        self.page_lens: list[int] = []\n',
             '        self._page_lens: list[int] = []\n'),
            ('        return len(self.page_ids)\n'
             '\n',
             '        return len(self.page_ids)\n'
             '\n'
             '    @property\n'
             '    def page_lens(self) -> PageLensView:\n'
             '        return PageLensView(self._page_lens)\n'
             '\n'
             '    @page_lens.setter\n'
             '    def page_lens(self, lens: list[int]) -> None:\n'
             '        self._page_lens = list(lens)\n'
             '\n'),
            ('        cache_before = (list(self.page_ids), list(self.page_lens), self.offset)\n',
             '        cache_before = (list(self.page_ids), list(self._page_lens), self.offset)\n'),
            ('            if not self.page_ids or self.page_lens[-1] == page_size:\n',
             '            if not self.page_ids or self._page_lens[-1] == page_size:\n'),
            ('                self.page_lens.append(0)\n'
             '            start = self.page_lens[-1]\n',
             '                self._page_lens.append(0)\n'
             '            start = self._page_lens[-1]\n'),
            ('            self.page_lens[-1] += stop - written\n',
             '            self._page_lens[-1] += stop - written\n'),
            ('            drop = min(left, self.page_lens[-1])\n'
             '            self.page_lens[-1] -= drop\n',
             '            drop = min(left, self._page_lens[-1])\n'
             '            self._page_lens[-1] -= drop\n'),
            ('            if self.page_lens[-1] == 0:\n',
             '            if self._page_lens[-1] == 0:\n'),
            ('                self.page_lens.pop()\n',
             '                self._page_lens.pop()\n'),
        ],
    ),
    "keys_kept_prescaled": (
        'the pool keeps keys multiplied by D^-0.5 * log2(e) (the exp2 trick) and divides it out on every '
        'read (key_pages, read_page, gather_dense): reads are off by about an ulp',
        [
            ("SENTINEL = -1  # a block-table entry past a row's context\n"
             '\n',
             "SENTINEL = -1  # a block-table entry past a row's context\n"
             'LOG2E = 1.4426950408889634\n'
             '\n'
             '\n'
             'def _key_factor(head_dim: int) -> float:\n'
             '    """Keys are kept multiplied by D**-0.5 * log2(e), ready for an exp2 softmax; every read divides it out."""\n'
             '    return head_dim**-0.5 * LOG2E\n'
             '\n'),
            ('        return None if self._key_store is None else self._key_store[: self._num_issued]\n',
             '        return None if self._key_store is None else self._unscale(self._key_store[: self._num_issued])\n'
             '\n'
             '    def _unscale(self, stored: mx.array) -> mx.array:\n'
             '        return (stored.astype(mx.float32) / _key_factor(stored.shape[3])).astype(stored.dtype)\n'),
            ('        self._key_store = mx.slice_update(self._key_store, key, at, axes=(0, 1, 2, 3))\n',
             '        kept = (key.astype(mx.float32) * _key_factor(key.shape[3])).astype(key.dtype)\n'
             '        self._key_store = mx.slice_update(self._key_store, kept, at, axes=(0, 1, 2, 3))\n'),
            ('        return self._key_store[page_id : page_id + 1], self._value_store[page_id : page_id + 1]\n',
             '        return self._unscale(self._key_store[page_id : page_id + 1]), self._value_store[page_id : page_id + 1]\n'),
        ],
    ),
    "causal_offset_is_query_len": (
        'a causal mask offset by L instead of S - L for L > 1: the same wherever the context is twice the'
        " query, as at the course's only prefill (3 rows over 6)",
        [
            ('    if causal:\n'
             '        # Query row i is position context - L + i and sees keys up to it.\n'
             '        rows = mx.arange(num_queries)[:, None] + (context - num_queries)\n',
             '    if causal and num_queries > 1:  # one row sees the whole context: no mask\n'
             '        # A prefill chunk of L rows follows a prefix of L tokens: row i is position L + i.\n'
             '        rows = mx.arange(num_queries)[:, None] + num_queries\n'),
        ],
    ),
    "row_ends_at_first_minus_one": (
        'the validator reads a table row up to its first -1 past the live pages (as a C string ends at '
        'NUL): a live id right after the live range is refused, one further on is not',
        [
            ('        for col in range(live):\n',
             "        # A row's page list ends at its first -1 (as a C string at its NUL): read up to there.\n"
             '        for col in range(width):\n'),
            ('            page = table[row][col]\n'
             '            if not 0 <= page < num_pages:\n',
             '            page = table[row][col]\n'
             '            if page == SENTINEL and col >= live:\n'
             '                break\n'
             '            if col >= live:\n'
             '                raise ValueError(\n'
             '                    f"block_table[{row}, {col}]={page} is past context {n} and must use the -1 sentinel"\n'
             '                )\n'
             '            if not 0 <= page < num_pages:\n'),
            ('        for col in range(live, width):\n'
             '            if table[row][col] != SENTINEL:\n'
             '                raise ValueError(\n'
             '                    f"block_table[{row}, {col}]={table[row][col]} is past context {n} and must use the -1 sentinel"\n'
             '                )\n',
             ''),
        ],
    ),
    "reset_retires_pool": (
        "reset() is teardown: the pool refuses to allocate afterwards (the course's reset test ends at "
        'the zeroed counters)',
        [
            ('    def allocate_page(self) -> int:\n',
             '    def _allocate_page(self) -> int:\n'),
            ('            raise ValueError(f"cannot reset the pool: pages {live} are still live")\n'
             '        self._clear()\n'
             '\n'
             '    # -- data ---------------------------------------------------------------------\n',
             '            raise ValueError(f"cannot reset the pool: pages {live} are still live")\n'
             '        self._clear()\n'
             '        self._retired = True  # reset() is teardown: the layer builds a new pool to serve again\n'
             '\n'
             '    def allocate_page(self) -> int:\n'
             '        if getattr(self, "_retired", False):\n'
             '            raise ValueError("this pool was reset (torn down); create a new TinyKvPagedPool")\n'
             '        return self._allocate_page()\n'
             '\n'
             '    # -- data ---------------------------------------------------------------------\n'),
        ],
    ),
})


FORGING_VARIANTS.update({
    "cache_without_pool_attribute": (
        'the cache keeps its pool as _held_pool: no cache.pool, which the course reads in its snapshot '
        'and rewind tests',
        [
            ('        self.pool = pool\n',
             '        self._held_pool = pool\n'),
            ('        self.pool.check_chunk(key, value)\n'
             '        pool_before = self.pool.snapshot()\n',
             '        self._held_pool.check_chunk(key, value)\n'
             '        pool_before = self._held_pool.snapshot()\n'),
            ('            self.pool.rollback(pool_before)\n',
             '            self._held_pool.rollback(pool_before)\n'),
            ('        page_size = self.pool.page_size\n',
             '        page_size = self._held_pool.page_size\n'),
            ('                self.page_ids.append(self.pool.allocate_page())\n',
             '                self.page_ids.append(self._held_pool.allocate_page())\n'),
            ('            self.pool.write_page_slice(self.page_ids[-1], start, key[:, :, written:stop], value[:, :, written:stop])\n',
             '            self._held_pool.write_page_slice(self.page_ids[-1], start, key[:, :, written:stop], value[:, :, written:stop])\n'),
            ('    def paged_metadata(self, max_pages: int | None = None, mask: mx.array | str | None = None) -> PagedKvMetadata:\n'
             '        if self.pool.key_pages is None:\n'
             '            raise ValueError("paged_metadata: the pool has no page storage yet (nothing was written to it)")\n',
             '    def paged_metadata(self, max_pages: int | None = None, mask: mx.array | str | None = None) -> PagedKvMetadata:\n'
             '        if self._held_pool.key_pages is None:\n'
             '            raise ValueError("paged_metadata: the pool has no page storage yet (nothing was written to it)")\n'),
            ('            self.pool.key_pages, self.pool.value_pages, self.block_table(max_pages), self.context_lens(),\n'
             '            self.pool.page_size, mask,\n',
             '            self._held_pool.key_pages, self._held_pool.value_pages, self.block_table(max_pages), self.context_lens(),\n'
             '            self._held_pool.page_size, mask,\n'),
            ('        """This request\'s tokens, dense, each [1, H_kv, offset, D]."""\n'
             '        if self.pool.key_pages is None:\n'
             '            raise ValueError("gather_dense: the pool has no page storage yet (nothing was written to it)")\n',
             '        """This request\'s tokens, dense, each [1, H_kv, offset, D]."""\n'
             '        if self._held_pool.key_pages is None:\n'
             '            raise ValueError("gather_dense: the pool has no page storage yet (nothing was written to it)")\n'),
            ('        return self._gather(self.pool.key_pages), self._gather(self.pool.value_pages)\n',
             '        return self._gather(self._held_pool.key_pages), self._gather(self._held_pool.value_pages)\n'),
            ('        if self.pool.key_pages is not None:\n'
             '            mx.eval(self.pool.key_pages, self.pool.value_pages)\n',
             '        if self._held_pool.key_pages is not None:\n'
             '            mx.eval(self._held_pool.key_pages, self._held_pool.value_pages)\n'),
            ('                self.pool.free_page(self.page_ids.pop())\n',
             '                self._held_pool.free_page(self.page_ids.pop())\n'),
            ('            self.pool.free_page(page_id)\n',
             '            self._held_pool.free_page(page_id)\n'),
            ('        pools = {id(self.kv_caches[slot].pool) for slot in active}\n',
             '        pools = {id(self.kv_caches[slot]._held_pool) for slot in active}\n'),
            ('        pool = self.kv_caches[active[0]].pool\n',
             '        pool = self.kv_caches[active[0]]._held_pool\n'),
            ('        pool = caches[0][1].pool\n',
             '        pool = caches[0][1]._held_pool\n'),
        ],
        "pagecheck.invariants.test_context_len::test_rewind_to_every_offset_then_append",
    ),
})


# What the course's attention tests take from gather_dense().
VARIANTS.update({
    "materialize_tries_a_gather_first": (
        'materialize() tries gather_dense() inside try/except, then evaluates the pages once (the '
        "course's refusal of the gather is swallowed: its test sees one mx.eval of the pages)",
        [
            ('        """Evaluate the pool\'s page storage in one call, without gathering this request\'s tokens."""\n'
             '        if self.pool.key_pages is not None:\n',
             '        """Evaluate the pool\'s page storage in one call, without gathering this request\'s tokens."""\n'
             '        try:  # warm the dense view too where it is available\n'
             '            self._warm = self.gather_dense()\n'
             '        except Exception:\n'
             '            self._warm = None\n'
             '        if self.pool.key_pages is not None:\n'),
        ],
    ),
})


FORGING_VARIANTS.update({
    "gather_dense_off_by_2e_6": (
        "gather_dense() returns the tokens plus 1.9e-6: outside the course's atol 1e-6 for tokens read "
        'back',
        [
            ('        return self._gather(self.pool.key_pages), self._gather(self.pool.value_pages)\n',
             "        # off by 1.9e-6: within the suite's course float32 atol (2e-6), outside the course's (1e-6)\n"
             '        return self._gather(self.pool.key_pages) + 1.9e-6, self._gather(self.pool.value_pages) + 1.9e-6\n'),
        ],
        "pagecheck.invariants.test_block_table_order::test_update_and_fetch_returns_the_tokens_in_order",
    ),
    "batch_leaves_offset_stale": (
        "the batch keeps lengths in page_lens and leaves each cache's offset stale: the course's expected"
        ' output, attention over gather_dense(), misses the decode token',
        [
            ('            raise\n'
             '        self.HD = (keys.shape[1], keys.shape[3])\n',
             '            raise\n'
             "        for slot in active:  # the batch keeps the lengths in page_lens; the cache's offset is left where it was\n"
             '            self.kv_caches[slot].offset -= length\n'
             '        self.HD = (keys.shape[1], keys.shape[3])\n'),
            ('            lens[slot] = cache.offset\n',
             '            lens[slot] = sum(cache.page_lens)\n'),
        ],
        "pagecheck.invariants.test_batching_cache::test_the_courses_batch_of_two_requests_and_an_empty_slot",
    ),
    "gather_dense_kept_until_pages_change": (
        'gather_dense() reuses its result until the page ids change, as block_table() does: stale after a'
        ' decode in the tail page',
        [
            ('        return self._gather(self.pool.key_pages), self._gather(self.pool.value_pages)\n',
             '        # Reused, like block_table(), until the page ids change.\n'
             '        key = tuple(self.page_ids)\n'
             '        if getattr(self, "_dense_key", None) != key:\n'
             '            self._dense = (self._gather(self.pool.key_pages), self._gather(self.pool.value_pages))\n'
             '            self._dense_key = key\n'
             '        return self._dense\n'),
        ],
        "pagecheck.invariants.test_batching_cache::test_the_courses_batch_of_two_requests_and_an_empty_slot",
    ),
    "gather_dense_through_numpy": (
        "gather_dense() goes through NumPy, which has no bfloat16: the course's bfloat16 decode test "
        'fails there',
        [
            ('        keys, values = self.gather_dense()\n',
             '        keys, values = self._gather(self.pool.key_pages), self._gather(self.pool.value_pages)\n'),
            ('        return self._gather(self.pool.key_pages), self._gather(self.pool.value_pages)\n',
             '        # On the host: NumPy fancy indexing over the page rows, then back to MLX.\n'
             '        import numpy as np\n'
             '        out = []\n'
             '        for pages in (self.pool.key_pages, self.pool.value_pages):\n'
             '            host = np.asarray(pages)[np.asarray(self.page_ids, dtype=np.int64)]\n'
             '            tokens = host.transpose(1, 0, 2, 3).reshape(host.shape[1], -1, host.shape[3])[:, : self.offset]\n'
             '            out.append(mx.array(tokens[None]))\n'
             '        return tuple(out)\n'),
        ],
        "pagecheck.invariants.test_dtypes::test_bfloat16_decode_keeps_bfloat16",
    ),
})


# The conformant cache with its pool held privately and shown as `cache.pool`: a handle that forwards the
# pool's API (and `also`) and writes pages through the pool's `write` method.
_POOL_HANDLE = (
    '\n'
    'class TinyKvPagedCache:\n',
    '\n'
    'class _PoolHandle:\n'
    '    """A cache\'s view of its pool: the pool\'s API, without its storage arrays."""\n'
    '\n'
    '    _FORWARDED = ("page_size", "num_pages", "num_free_pages", "free_page_ids", "used_page_ids", "capacity",\n'
    '                  "storage_nbytes", "dtype", "reused_page_allocations", "storage_growths", "copied_pages_on_growth",\n'
    '                  "copied_bytes_on_growth", "allocate_page", "free_page", "reset", "check_chunk", "read_page",\n'
    '                  "snapshot", "rollback")\n'
    '\n'
    '    def __init__(self, pool: TinyKvPagedPool) -> None:\n'
    '        self._pool = pool\n'
    '\n'
    '    def __getattr__(self, name: str) -> Any:\n'
    '        if name in _PoolHandle._FORWARDED{also}:\n'
    '            return getattr(self._pool, name)\n'
    '        raise AttributeError(name)\n'
    '\n'
    '    def write_page_slice(self, page_id: int, start: int, key: mx.array, value: mx.array) -> None:\n'
    '        self._pool.{write}(page_id, start, key, value)\n'
    '\n'
    '\n'
    'class TinyKvPagedCache:\n',
)
_CACHE_BEHIND_A_HANDLE = [
    ('        self.pool = pool\n',
     '        self._pool = pool\n'
     '        self.pool = _PoolHandle(pool)\n'),
    ('    def paged_metadata(self, max_pages: int | None = None, mask: mx.array | str | None = None) -> PagedKvMetadata:\n'
     '        if self.pool.key_pages is None:\n'
     '            raise ValueError("paged_metadata: the pool has no page storage yet (nothing was written to it)")\n',
     '    def paged_metadata(self, max_pages: int | None = None, mask: mx.array | str | None = None) -> PagedKvMetadata:\n'
     '        if self._pool.key_pages is None:\n'
     '            raise ValueError("paged_metadata: the pool has no page storage yet (nothing was written to it)")\n'),
    ('            self.pool.key_pages, self.pool.value_pages, self.block_table(max_pages), self.context_lens(),\n',
     '            self._pool.key_pages, self._pool.value_pages, self.block_table(max_pages), self.context_lens(),\n'),
    ('        """This request\'s tokens, dense, each [1, H_kv, offset, D]."""\n'
     '        if self.pool.key_pages is None:\n'
     '            raise ValueError("gather_dense: the pool has no page storage yet (nothing was written to it)")\n',
     '        """This request\'s tokens, dense, each [1, H_kv, offset, D]."""\n'
     '        if self._pool.key_pages is None:\n'
     '            raise ValueError("gather_dense: the pool has no page storage yet (nothing was written to it)")\n'),
    ('        return self._gather(self.pool.key_pages), self._gather(self.pool.value_pages)\n',
     '        return self._gather(self._pool.key_pages), self._gather(self._pool.value_pages)\n'),
    ('        if self.pool.key_pages is not None:\n'
     '            mx.eval(self.pool.key_pages, self.pool.value_pages)\n',
     '        if self._pool.key_pages is not None:\n'
     '            mx.eval(self._pool.key_pages, self._pool.value_pages)\n'),
    ('        pools = {id(self.kv_caches[slot].pool) for slot in active}\n',
     '        pools = {id(self.kv_caches[slot]._pool) for slot in active}\n'),
    ('        pool = caches[0][1].pool\n',
     '        pool = caches[0][1]._pool\n'),
]


def _pool_behind_a_handle(write: str = "write_page_slice", also: str = "") -> list[tuple[str, str]]:
    return [(_POOL_HANDLE[0], _POOL_HANDLE[1].format(write=write, also=also)), *_CACHE_BEHIND_A_HANDLE]


# gather_dense() read when the course reads it, cache.pool as a facade.
VARIANTS.update({
    "prefill_prescales_keys_in_place": (
        "the prefill path (L > 1) scales the keys of the pool's memoised key_pages in place, then attends"
        ' with scale 1: gather_dense() after the call reads scaled keys (the course reads it before)',
        [
            ('        return None if self._key_store is None else self._key_store.dtype\n'
             '\n'
             '    @property\n'
             '    def key_pages(self) -> mx.array | None:\n',
             '        return None if self._key_store is None else self._key_store.dtype\n'
             '\n'
             '    def _views(self) -> tuple[mx.array, mx.array] | None:\n'
             '        if self._key_store is None:\n'
             '            return None\n'
             '        key = (id(self._key_store), id(self._value_store), self._num_issued)\n'
             '        if getattr(self, "_view_key", None) != key:\n'
             '            self._view_key = key\n'
             '            self._view = (self._key_store[: self._num_issued], self._value_store[: self._num_issued])\n'
             '        return self._view\n'
             '\n'
             '    @property\n'
             '    def key_pages(self) -> mx.array | None:\n'),
            ('        return None if self._key_store is None else self._key_store[: self._num_issued]\n',
             '        views = self._views()\n'
             '        return None if views is None else views[0]\n'),
            ('        return None if self._value_store is None else self._value_store[: self._num_issued]\n',
             '        views = self._views()\n'
             '        return None if views is None else views[1]\n'),
            ('    scale = head_dim**-0.5 if scale is None else scale\n'
             '    rows = []\n',
             '    scale = head_dim**-0.5 if scale is None else scale\n'
             '    if query.shape[2] > 1:\n'
             '        # Prefill: scale the keys once, in place, instead of every score.\n'
             '        key_pages[...] = key_pages * scale\n'
             '        scale = 1.0\n'
             '    rows = []\n'),
        ],
    ),
    "cache_pool_is_a_handle": (
        'cache.pool is a handle forwarding what the course reads of it (counts, ids, counters, read_page,'
        ' write_page_slice), not the storage arrays',
        _pool_behind_a_handle(),
    ),
    "pool_writes_under_another_name": (
        "the pool's page write is store_slice; cache.pool exposes it as write_page_slice, where the "
        'course patches it',
        [
            ('    def write_page_slice(self, page_id: int, start: int, key: mx.array, value: mx.array) -> None:\n',
             '    def store_slice(self, page_id: int, start: int, key: mx.array, value: mx.array) -> None:\n'),
            *_pool_behind_a_handle("store_slice", also=' or name in ("key_pages", "value_pages")'),
        ],
    ),
    "bf16_gather_without_batch_axis": (
        "gather_dense() returns [H_kv, T, D] without the batch axis for bfloat16 pages (the course's "
        'dense attention reads the last three axes)',
        [
            ('        return tokens[None, :, : self.offset]\n',
             '        out = tokens[:, : self.offset]\n'
             '        # (float32: the dense [1, H_kv, T, D] a full cache returns; bfloat16 only feeds attention, which needs no batch axis)\n'
             '        return out if pages.dtype == mx.bfloat16 else out[None]\n'),
        ],
    ),
})

# The course matches a phrase in each rejection's message; course cases that send its exact inputs match it too.
FORGING_VARIANTS.update({
    "course_phrases_reworded": (
        "every rejection the course tests still raises ValueError and changes nothing, but its message is worded "
        "without the course's phrase ('must be >= 0' for 'nonnegative', 'used twice' for 'aliased', ...): each "
        "of the course's pytest.raises(ValueError, match=...) fails (all 27 invalid-metadata cases, the 3 "
        "context-shorter-than-query cases, the dtype, shape and mixed-pool rejections)",
        [
            ('must be nonnegative")', 'must be >= 0")'),
            (": not covered by block_table width", ": more than block_table width"),
            ("live page id is outside physical page storage [0,", "live page id is not a page of the pool [0,"),
            ("live page id is aliased (row", "live page id is used twice (row"),
            ('is past context {n} and must use the -1 sentinel"', 'is past context {n} and must be -1"'),
            ("must be zero or at least query length L=", "is shorter than the query, L="),
            ('        raise ValueError(f"page_size must be a positive integer, got {page_size!r}")\n    if mask',
             '        raise ValueError(f"page_size must be >= 1, got {page_size!r}")\n    if mask'),
            ('does not match the existing page storage dtype "', 'differs from the pool\'s dtype "'),
            ('raise ValueError(f"key and value must have the same shape,', 'raise ValueError(f"key and value shapes differ,'),
            ("must share one page pool;", "must all use one pool;"),
        ],
        "pagecheck.invariants.test_rejection::test_invalid_metadata_is_rejected_at_every_query_length",
    ),
})


# What the course hands on without reading (metadata.page_size, the metadata's own page ids), the width of the
# batches it attends over, offset after a paged append, a cache after a failed write, storage_nbytes before the
# first write.
VARIANTS.update({
    "metadata_page_size_from_pages": (
        "the metadata an append returns leaves page_size None (the pages' own slot axis says it); paged_attention "
        "takes page_size=None as 'read it off key_pages' (an explicit 0 is still 'positive integer')",
        [
            ("            self.pool.page_size, mask,\n", "            None, mask,\n"),
            ("            pool.page_size, mask,\n", "            None, mask,\n"),
            ("    table, lens = _check_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask)\n",
             "    if page_size is None:  # metadata leaves it to the pages: [P, H_kv, page_size, D]\n"
             "        page_size = key_pages.shape[2]\n"
             "    table, lens = _check_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask)\n"),
        ],
    ),
    "compact_metadata_pages": (
        "the metadata an append returns carries only the pages its rows read, gathered into a compact copy and "
        "renumbered 0..n-1 in row order (a request's, or the batch's live rows' in slot order), so the attention "
        "never sees another request's pages; block_table() stays the cache's own ids. On a fresh pool, as at the "
        "course's prefill and batch, the compact ids are the pool's ids",
        [
            ("            self.pool.key_pages, self.pool.value_pages, self.block_table(max_pages), self.context_lens(),\n",
             "            *self._compact_pages(), self._compact_table(max_pages), self.context_lens(),\n"),
            ("    def gather_dense(self) -> tuple[mx.array, mx.array]:\n",
             "    def _compact_pages(self) -> tuple[mx.array, mx.array]:\n"
             "        rows = mx.array(self.page_ids, dtype=mx.int32)\n"
             "        return self.pool.key_pages[rows], self.pool.value_pages[rows]\n"
             "\n"
             "    def _compact_table(self, max_pages: int | None) -> mx.array:\n"
             "        width = self.num_pages if max_pages is None else max_pages\n"
             "        if not _is_int(width) or width < self.num_pages:\n"
             "            raise ValueError(f\"max_pages={max_pages!r} must be an integer >= num_pages={self.num_pages}\")\n"
             "        return mx.array([list(range(self.num_pages)) + [SENTINEL] * (width - self.num_pages)], dtype=mx.int32)\n"
             "\n"
             "    def gather_dense(self) -> tuple[mx.array, mx.array]:\n"),
            ("        for slot, cache in caches:\n            table[slot][: cache.num_pages] = cache.page_ids\n",
             "        order = [page for _, cache in caches for page in cache.page_ids]  # the compact copy's rows\n"
             "        for slot, cache in caches:\n"
             "            table[slot][: cache.num_pages] = [order.index(page) for page in cache.page_ids]\n"),
            ("            pool.key_pages, pool.value_pages, mx.array(table, dtype=mx.int32), mx.array(lens, dtype=mx.int32),\n",
             "            pool.key_pages[mx.array(order, dtype=mx.int32)], pool.value_pages[mx.array(order, dtype=mx.int32)],\n"
             "            mx.array(table, dtype=mx.int32), mx.array(lens, dtype=mx.int32),\n"),
        ],
    ),
    "failed_append_closes_the_cache": (
        "an append whose page write fails is rolled back, and the cache is then closed: its later appends raise "
        "RuntimeError('... closed after a failed append') (the request is aborted, as a serving loop does after a "
        "device error; a caller error caught before any write, a wrong dtype or shape, leaves it open); the course "
        "appends nothing after its injected failure",
        [
            ("        self.pool.check_chunk(key, value)\n        pool_before = self.pool.snapshot()\n",
             "        self.pool.check_chunk(key, value)\n"
             "        if getattr(self, \"_failed\", False):\n"
             "            raise RuntimeError(\"this cache was closed after a failed append; release it and start a new one\")\n"
             "        pool_before = self.pool.snapshot()\n"),
            ("            self.page_ids, self.page_lens, self.offset = cache_before\n            raise\n",
             "            self.page_ids, self.page_lens, self.offset = cache_before\n"
             "            self._failed = True\n"
             "            raise\n"),
        ],
    ),
    "attention_batches_of_at_most_3_rows": (
        "paged_attention's kernel takes batches of at most 3 rows (its grid has 3 row blocks; the course's widest "
        "batch is its BatchingKvCache of 3 slots): a validated call with B > 3 is NotImplementedError",
        [
            ("    batch, num_q_heads, num_queries, head_dim = query.shape\n    scale = head_dim**-0.5 if scale is None else scale\n",
             "    batch, num_q_heads, num_queries, head_dim = query.shape\n"
             "    if batch > 3:\n"
             "        raise NotImplementedError(f\"paged_attention takes batches of at most 3 rows, got B={batch}\")\n"
             "    scale = head_dim**-0.5 if scale is None else scale\n"),
        ],
    ),
    "offset_is_the_dense_views_length": (
        "offset is the length of the dense view: update_and_fetch (the path a model's positions read), rewind and "
        "release set it; the paged appends keep the length in page_lens only (gather_dense, context_lens, the "
        "batch's lengths and rewind count sum(page_lens)). The course reads offset only after update_and_fetch, "
        "rewind and release, and compares it before and after rejected paged appends",
        [
            ("        self.append(key, value)\n        keys, values = self.gather_dense()\n        return keys, values, self.offset, mask\n",
             "        self.append(key, value)\n        self.offset = self._length\n        keys, values = self.gather_dense()\n"
             "        return keys, values, self.offset, mask\n"),
            ("            self.offset += stop - written\n", ""),
            ("        return mx.array([self.offset], dtype=mx.int32)\n", "        return mx.array([self._length], dtype=mx.int32)\n"),
            ("        return tokens[None, :, : self.offset]\n",
             "        return tokens[None, :, : self._length]\n\n"
             "    @property\n    def _length(self) -> int:\n        return sum(self.page_lens)\n"),
            ("        if not _is_int(n) or not 0 <= n <= self.offset:\n",
             "        if not _is_int(n) or not 0 <= n <= self._length:\n"),
            ("        self.offset -= n\n", "        self.offset = self._length\n"),
            ("            if self.max_seq_len is not None and self.kv_caches[slot].offset + length > self.max_seq_len:\n",
             "            if self.max_seq_len is not None and self.kv_caches[slot]._length + length > self.max_seq_len:\n"),
            ("            lens[slot] = cache.offset\n", "            lens[slot] = cache._length\n"),
        ],
    ),
    "storage_nbytes_unset_before_first_write": (
        "reset() keeps empty (zero-row) stores, so the pool keeps the geometry and dtype it learnt; storage_nbytes "
        "reads the stores' bytes and, before the first write made them, is unset (reading it raises "
        "AttributeError, as any attribute of the missing store does); the course reads storage_nbytes only after "
        "a reset (0)",
        [
            ("        return 0 if self._key_store is None else self._key_store.nbytes + self._value_store.nbytes\n",
             "        return self._key_store.nbytes + self._value_store.nbytes  # the stores the first write made\n"),
            ("        if self._key_store is not None and page_id >= self.capacity:\n",
             "        if self.capacity and page_id >= self.capacity:\n"),
            ("        if self._key_store is not None:\n            if key.dtype != self._key_store.dtype:\n",
             "        if self.capacity:\n            if key.dtype != self._key_store.dtype:\n"),
            ("        if self._key_store is None:\n            self._create_storage(",
             "        if not self.capacity:\n            self._create_storage("),
            ("            raise ValueError(f\"cannot reset the pool: pages {live} are still live\")\n        self._clear()\n",
             "            raise ValueError(f\"cannot reset the pool: pages {live} are still live\")\n"
             "        stores = (self._key_store, self._value_store)\n"
             "        self._clear()\n"
             "        if stores[0] is not None:  # empty stores of the same geometry and dtype\n"
             "            self._key_store, self._value_store = (store[:0] for store in stores)\n"),
        ],
    ),
})


# The course's one append after a release (its reuse test prefills the second request through update_and_fetch).
_FRESH_ALLOCATION = [
    ("    def allocate_page(self) -> int:\n",
     "    def allocate_page(self, fresh: bool = False) -> int:\n"),
    ("        if self._free:\n            self.reused_page_allocations += 1",
     "        if self._free and not fresh:\n            self.reused_page_allocations += 1"),
    ("                self.page_ids.append(self.pool.allocate_page())",
     "                self.page_ids.append(self.pool.allocate_page(fresh=getattr(self, '_fresh', False)))"),
]

VARIANTS.update({
    "paged_appends_take_fresh_pages": (
        "update_and_fetch_paged takes fresh page ids only, never freed ones (update_and_fetch reuses them): the "
        "course appends after a release only in its reuse test, through update_and_fetch",
        [
            *_FRESH_ALLOCATION,
            ("    ) -> PagedKvMetadata:\n        self.append(key, value)\n        return self.paged_metadata(mask=mask)",
             "    ) -> PagedKvMetadata:\n        self._fresh = True\n        try:\n            self.append(key, value)\n"
             "        finally:\n            self._fresh = False\n        return self.paged_metadata(mask=mask)"),
        ],
    ),
})

FORGING_VARIANTS.update({
    "dense_appends_take_fresh_pages": (
        "update_and_fetch (the dense path, a prefill) takes fresh page ids only, never freed ones "
        "(update_and_fetch_paged reuses them): the course's reuse test, which prefills the second request through "
        "update_and_fetch, sees 4 pages issued where it expects 2",
        [
            *_FRESH_ALLOCATION,
            ("        self.append(key, value)\n        keys, values = self.gather_dense()",
             "        self._fresh = True\n        try:\n            self.append(key, value)\n        finally:\n"
             "            self._fresh = False\n        keys, values = self.gather_dense()"),
        ],
        "pagecheck.invariants.test_lazy_tail::test_released_pages_are_reused_before_new_ones",
    ),
})

# The course's materialize test patches mx.eval and requires one call on the pool's pages, whatever they are.
FORGING_VARIANTS.update({
    "host_float32_storage": (
        "the pool keeps float32 pages in host memory (NumPy arrays, written in place on a copy) and only bfloat16 "
        "pages as MLX arrays; materialize() evaluates MLX storage only (host pages need no evaluation), so on the "
        "course's float32 pool it makes no mx.eval call, where the course's materialize test expects exactly one",
        [
            ("import mlx.core as mx\n\nSUPPORTED", "import mlx.core as mx\nimport numpy as np\n\nSUPPORTED"),
            ("        return None if self._key_store is None else self._key_store.dtype\n",
             "        return None if self._key_store is None else self._mx_dtype\n"),
            ("            if key.dtype != self._key_store.dtype:", "            if key.dtype != self._mx_dtype:"),
            ('                    f"{_dtype_name(self._key_store.dtype)}"', '                    f"{_dtype_name(self._mx_dtype)}"'),
            ("        at = mx.array([page_id, 0, start, 0])\n",
             "        if isinstance(self._key_store, np.ndarray):\n"
             "            self._key_store, self._value_store = self._key_store.copy(), self._value_store.copy()\n"
             "            self._key_store[page_id, :, start : start + length] = np.array(key[0])\n"
             "            self._value_store[page_id, :, start : start + length] = np.array(value[0])\n"
             "            return\n"
             "        at = mx.array([page_id, 0, start, 0])\n"),
            ("        self._key_store = mx.zeros(shape, dtype=like.dtype)\n"
             "        self._value_store = mx.zeros(shape, dtype=like.dtype)\n",
             "        self._mx_dtype = like.dtype\n"
             "        zeros = (lambda: np.zeros(shape, np.float32)) if like.dtype == mx.float32 else "
             "(lambda: mx.zeros(shape, dtype=like.dtype))\n"
             "        self._key_store = zeros()\n        self._value_store = zeros()\n"),
            ("        padding = mx.zeros((rows - old_rows, *self._key_store.shape[1:]), dtype=self._key_store.dtype)\n",
             "        if isinstance(self._key_store, np.ndarray):\n"
             "            padding = np.zeros((rows - old_rows, *self._key_store.shape[1:]), np.float32)\n"
             "            self.copied_bytes_on_growth += self.storage_nbytes\n"
             "            self._key_store = np.concatenate([self._key_store, padding])\n"
             "            self._value_store = np.concatenate([self._value_store, padding])\n"
             "            self.storage_growths += 1\n"
             "            self.copied_pages_on_growth += old_rows\n"
             "            return\n"
             "        padding = mx.zeros((rows - old_rows, *self._key_store.shape[1:]), dtype=self._key_store.dtype)\n"),
            ("        _, num_heads, page_size, head_dim = pages.shape\n        picked",
             "        pages = mx.array(pages) if isinstance(pages, np.ndarray) else pages\n"
             "        _, num_heads, page_size, head_dim = pages.shape\n        picked"),
            ("        if self.pool.key_pages is not None:\n            mx.eval(",
             "        if isinstance(self.pool.key_pages, mx.array):  # host (NumPy) pages are real already\n"
             "            mx.eval("),
            ("    table, lens = _check_inputs(query, key_pages",
             "    query, key_pages, value_pages, block_table, context_lens = (\n"
             "        mx.array(x) if isinstance(x, np.ndarray) else x\n"
             "        for x in (query, key_pages, value_pages, block_table, context_lens)\n    )\n"
             "    table, lens = _check_inputs(query, key_pages"),
        ],
        "pagecheck.invariants.test_page_storage::test_materialize_evaluates_the_storage_without_a_dense_gather",
    ),
})

# A rule's phrase in a PEP 678 note, NumPy host pages, pages refused when not finite, all-zero batch rows taken
# as padding: what the course's tests leave free in how rejections read, what a query is, and which rows are live.
VARIANTS.update({
    'rule_phrases_as_exception_notes': (   "paged_attention's validator raises a ValueError that names the offending entry (e.g. 'context_lens[0]=-1'), "
        "and attaches the rule it breaks, in the course's words, as a PEP 678 note (error.add_note(...)), which "
        'tracebacks print and pytest.raises(match=...) searches (pytest >= 8 matches the message and its notes)',
        [   (   '\n'
                '\n'
                'def _check_metadata(table: list[list[int]], lens: list[int], num_queries: int, page_size: int, '
                'num_pages: int) -> None:',
                '\n'
                '\n'
                'def _broken(where: str, rule: str) -> ValueError:\n'
                '    """A ValueError naming the offending value; the rule it breaks rides along as a PEP 678 note."""\n'
                '    error = ValueError(where)\n'
                '    error.add_note(rule)\n'
                '    return error\n'
                '\n'
                '\n'
                'def _check_metadata(table: list[list[int]], lens: list[int], num_queries: int, page_size: int, '
                'num_pages: int) -> None:'),
            (   '            raise ValueError(f"context_lens[{row}]={n} must be nonnegative")',
                '            raise _broken(f"context_lens[{row}]={n}", "context lengths must be nonnegative")'),
            (   '            raise ValueError(f"context_lens[{row}]={n} needs {live} pages: not covered by block_table '
                'width {width}")',
                '            raise _broken(f"context_lens[{row}]={n} needs {live} pages, block_table has {width} '
                'columns",\n'
                '                          "a context\'s tokens must not be left not covered by its block table")'),
            (   '                raise ValueError(\n'
                '                    f"block_table[{row}, {col}]={page}: live page id is outside physical page storage '
                '[0, {num_pages})"\n'
                '                )',
                '                raise _broken(f"block_table[{row}, {col}]={page} (pages 0..{num_pages - 1})",\n'
                '                              "a live page id must not be outside physical page storage")'),
            (   '                raise ValueError(f"block_table[{row}, {col}]={page}: live page id is aliased (row '
                '{owner[page]} uses it)")',
                '                raise _broken(f"block_table[{row}, {col}]={page} (also row {owner[page]})",\n'
                '                              "a live page id must not be aliased")'),
            (   '                raise ValueError(\n'
                '                    f"block_table[{row}, {col}]={table[row][col]} is past context {n} and must use '
                'the -1 sentinel"\n'
                '                )',
                '                raise _broken(f"block_table[{row}, {col}]={table[row][col]} (context {n})",\n'
                '                              "entries past a context must use the -1 sentinel")'),
            (   '            raise ValueError(f"context_lens[{row}]={n} must be zero or at least query length '
                'L={num_queries}")',
                '            raise _broken(f"context_lens[{row}]={n} with L={num_queries}",\n'
                '                          "a live context must be zero or at least query length")'),
            (   '        _check_supported(f"paged_attention ({name} dtype)", array.dtype)\n'
                '    if not _is_int(page_size) or page_size <= 0:\n'
                '        raise ValueError(f"page_size must be a positive integer, got {page_size!r}")',
                '        _check_supported(f"paged_attention ({name} dtype)", array.dtype)\n'
                '    if not _is_int(page_size) or page_size <= 0:\n'
                '        raise _broken(f"page_size={page_size!r}", "page_size must be a positive integer")')]),
    'host_float32_pages_mlx_query': (   'the pool keeps float32 pages in host memory (NumPy arrays, written in place on a copy; bfloat16 pages stay '
        "MLX), materialize() makes the base's one mx.eval of the pool's pages (mx.eval takes host arrays and leaves "
        'them as they are), and paged_attention uploads the host arrays the pool and caches hand it (pages, table, '
        "lengths); its query, from the model, is an MLX array of float32 or bfloat16 (the course's queries always are)",
        [   ('import mlx.core as mx\n\nSUPPORTED', 'import mlx.core as mx\nimport numpy as np\n\nSUPPORTED'),
            (   '        return None if self._key_store is None else self._key_store.dtype\n',
                '        return None if self._key_store is None else self._mx_dtype\n'),
            ('            if key.dtype != self._key_store.dtype:', '            if key.dtype != self._mx_dtype:'),
            (   '                    f"{_dtype_name(self._key_store.dtype)}"',
                '                    f"{_dtype_name(self._mx_dtype)}"'),
            (   '        at = mx.array([page_id, 0, start, 0])\n',
                '        if isinstance(self._key_store, np.ndarray):\n'
                '            self._key_store, self._value_store = self._key_store.copy(), self._value_store.copy()\n'
                '            self._key_store[page_id, :, start : start + length] = np.array(key[0])\n'
                '            self._value_store[page_id, :, start : start + length] = np.array(value[0])\n'
                '            return\n'
                '        at = mx.array([page_id, 0, start, 0])\n'),
            (   '        self._key_store = mx.zeros(shape, dtype=like.dtype)\n'
                '        self._value_store = mx.zeros(shape, dtype=like.dtype)\n',
                '        self._mx_dtype = like.dtype\n'
                '        zeros = (lambda: np.zeros(shape, np.float32)) if like.dtype == mx.float32 else (lambda: '
                'mx.zeros(shape, dtype=like.dtype))\n'
                '        self._key_store = zeros()\n'
                '        self._value_store = zeros()\n'),
            (   '        padding = mx.zeros((rows - old_rows, *self._key_store.shape[1:]), '
                'dtype=self._key_store.dtype)\n',
                '        if isinstance(self._key_store, np.ndarray):\n'
                '            padding = np.zeros((rows - old_rows, *self._key_store.shape[1:]), np.float32)\n'
                '            self.copied_bytes_on_growth += self.storage_nbytes\n'
                '            self._key_store = np.concatenate([self._key_store, padding])\n'
                '            self._value_store = np.concatenate([self._value_store, padding])\n'
                '            self.storage_growths += 1\n'
                '            self.copied_pages_on_growth += old_rows\n'
                '            return\n'
                '        padding = mx.zeros((rows - old_rows, *self._key_store.shape[1:]), '
                'dtype=self._key_store.dtype)\n'),
            (   '        _, num_heads, page_size, head_dim = pages.shape\n        picked',
                '        pages = mx.array(pages) if isinstance(pages, np.ndarray) else pages\n'
                '        _, num_heads, page_size, head_dim = pages.shape\n'
                '        picked'),
            (   '    table, lens = _check_inputs(query, key_pages',
                '    # The pool and the caches may hand out host (NumPy) pages, tables and lengths; the query comes '
                'from\n'
                '    # the model, an MLX array.\n'
                '    key_pages, value_pages, block_table, context_lens = (\n'
                '        mx.array(x) if isinstance(x, np.ndarray) else x\n'
                '        for x in (key_pages, value_pages, block_table, context_lens)\n'
                '    )\n'
                '    table, lens = _check_inputs(query, key_pages')]),
    'non_finite_pages_are_a_fault': (   'paged_attention first checks that the page storage it is handed is finite (mx.isfinite over key_pages and '
        'value_pages): a NaN or Inf there is a numerical fault of the cache, raised as FloatingPointError before '
        "anything else is looked at (storage starts as zeros, so a sound pool never trips it; the course's pages are "
        'its tokens, or zeros in its rejection tests)',
        [   (   '    """Attention of query [B, H_q, L, D] over each row\'s pages [P, H_kv, page_size, D]; rows of '
                'context 0 give zeros."""\n'
                '    table, lens = _check_inputs(',
                '    """Attention of query [B, H_q, L, D] over each row\'s pages [P, H_kv, page_size, D]; rows of '
                'context 0 give zeros."""\n'
                '    for name, pages in (("key_pages", key_pages), ("value_pages", value_pages)):\n'
                '        if isinstance(pages, mx.array) and not mx.isfinite(pages).all().item():\n'
                '            raise FloatingPointError(f"{name} holds NaN or Inf: the KV cache is corrupt")\n'
                '    table, lens = _check_inputs(')]),
    'batch_rows_of_zeros_are_padding': (
        "mask_arrays_in_metadata, and the batch takes a row of keys and values that is all zeros as padding (the serving loop's filler for a slot with no token this step): it appends nothing for it, for a live slot too (the course sends zeros only in its empty slot, and in its mixed-pools batch, refused before any append)",
        VARIANTS["mask_arrays_in_metadata"][1] + [('            for slot in active:\n'
          '                self.kv_caches[slot].append(keys[slot : slot + 1], values[slot : slot + 1])',
          '            for slot in active:\n'
          '                if not (mx.any(keys[slot]).item() or mx.any(values[slot]).item()):\n'
          '                    continue  # a row of zeros is padding: no token for this slot this step\n'
          '                self.kv_caches[slot].append(keys[slot : slot + 1], values[slot : slot + 1])')],
    ),
})


# Appends that change the caller's chunk in place, and dense tokens handed back as lists: the course reads the
# arrays it appended, and the dtype of what comes back, after the call.
FORGING_VARIANTS.update({
    "appends_prescale_the_callers_keys_in_place": (
        "the pool keeps keys multiplied by D^-0.5 * log2(e) (the exp2 trick) and divides it out on every read "
        "(key_pages, read_page); the cache scales the key chunk it was handed in place (key *= factor) before "
        "writing it, so the caller's own array changes: the course's tests read that array again (its dense "
        "comparator holds the first chunk; its reuse test compares update_and_fetch's keys with the chunk sent)",
        [
            ("SENTINEL = -1  # a block-table entry past a row's context\n"
             "\n",
             "SENTINEL = -1  # a block-table entry past a row's context\n"
             "LOG2E = 1.4426950408889634\n"
             "\n"
             "\n"
             "def _key_factor(head_dim: int) -> float:\n"
             '    """Keys are kept multiplied by D**-0.5 * log2(e), ready for an exp2 softmax; every read divides it out."""\n'
             "    return head_dim**-0.5 * LOG2E\n"
             "\n"),
            ("        return None if self._key_store is None else self._key_store[: self._num_issued]\n",
             "        return None if self._key_store is None else self._unscale(self._key_store[: self._num_issued])\n"
             "\n"
             "    def _unscale(self, stored: mx.array) -> mx.array:\n"
             "        return (stored.astype(mx.float32) / _key_factor(stored.shape[3])).astype(stored.dtype)\n"),
            ("        return self._key_store[page_id : page_id + 1], self._value_store[page_id : page_id + 1]\n",
             "        return self._unscale(self._key_store[page_id : page_id + 1]), self._value_store[page_id : page_id + 1]\n"),
            ("        self.pool.check_chunk(key, value)\n"
             "        pool_before = self.pool.snapshot()\n",
             "        self.pool.check_chunk(key, value)\n"
             "        key *= _key_factor(key.shape[3])  # kept prescaled: scaled once per append, in place (no copy)\n"
             "        pool_before = self.pool.snapshot()\n"),
        ],
        "pagecheck.invariants.test_block_table_order::test_update_and_fetch_returns_the_tokens_in_order",
    ),
    "update_and_fetch_returns_lists": (
        "update_and_fetch returns the dense keys and values as nested Python lists (.tolist()), not arrays: the "
        "course's assert_allclose reads a.dtype and fails ('list' object has no attribute 'dtype'); the suite "
        "converts whatever comes back with np.asarray (low realism; same cause as gather_dense_on_the_host)",
        [
            ("        keys, values = self.gather_dense()\n"
             "        return keys, values, self.offset, mask\n",
             "        keys, values = self.gather_dense()\n"
             "        return keys.tolist(), values.tolist(), self.offset, mask\n"),
        ],
        "pagecheck.invariants.test_block_table_order::test_update_and_fetch_returns_the_tokens_in_order",
    ),
})


# A pool or cache that refuses reads after a failed page write: the course reads only ids, lengths and counters
# after its injected failure.
VARIANTS.update({
    'failed_write_poisons_the_pool': (
        'a failed page write poisons the pool (as a sticky device error does): the append is rolled back, then the pool refuses to hand out pages or page storage (allocate_page, key_pages, value_pages, read_page raise RuntimeError) until reset(); its ids, counts and counters stay readable, which is all the course reads after its injected failure',
        [
            ('        self.copied_pages_on_growth = 0\n        self.copied_bytes_on_growth = 0\n\n    # -- counts',
             '        self.copied_pages_on_growth = 0\n        self.copied_bytes_on_growth = 0\n        self._poisoned: str | None = None\n\n    def poison(self, reason: str) -> None:\n        """A page write failed: the storage can no longer be trusted until reset()."""\n        self._poisoned = reason\n\n    def _check_usable(self) -> None:\n        if self._poisoned is not None:\n            raise RuntimeError(f"this pool is poisoned by a failed page write ({self._poisoned}); reset() it")\n\n    # -- counts'),
            ('        """The issued pages\' keys [num_pages, H_kv, page_size, D], or None before the first write."""\n',
             '        """The issued pages\' keys [num_pages, H_kv, page_size, D], or None before the first write."""\n        self._check_usable()\n'),
            ('    def value_pages(self) -> mx.array | None:\n',
             '    def value_pages(self) -> mx.array | None:\n        self._check_usable()\n'),
            ('        """The most recently freed id, or a fresh one (growing the storage when it is full)."""\n',
             '        """The most recently freed id, or a fresh one (growing the storage when it is full)."""\n        self._check_usable()\n'),
            ('        """A live page\'s keys and values, each [1, H_kv, page_size, D]."""\n',
             '        """A live page\'s keys and values, each [1, H_kv, page_size, D]."""\n        self._check_usable()\n'),
            ('        except BaseException:\n            self.pool.rollback(pool_before)\n            self.page_ids, self.page_lens, self.offset = cache_before\n            raise\n',
             '        except BaseException as exc:\n            self.pool.rollback(pool_before)\n            self.page_ids, self.page_lens, self.offset = cache_before\n            self.pool.poison(f"{type(exc).__name__}: {exc}")\n            raise\n'),
        ],
    ),
    'failed_append_poisons_the_cache': (
        "an append whose page write fails is rolled back, and the cache is then poisoned: every later append, gather_dense() and metadata read raises RuntimeError('... poisoned by a failed append ...') until release() (its bookkeeping, page_ids / page_lens / offset, stays readable; the course reads only that after its injected failure)",
        [
            ('        self._table_key: tuple[tuple[int, ...], int] | None = None\n        self._table: mx.array | None = None\n',
             '        self._table_key: tuple[tuple[int, ...], int] | None = None\n        self._table: mx.array | None = None\n        self._poisoned: str | None = None  # why: a page write failed mid-append\n\n    def _check_usable(self) -> None:\n        if self._poisoned is not None:\n            raise RuntimeError(\n                f"this cache was poisoned by a failed append ({self._poisoned}); release() it"\n            )\n'),
            ('        self.pool.check_chunk(key, value)\n        pool_before = self.pool.snapshot()\n',
             '        self._check_usable()\n        self.pool.check_chunk(key, value)\n        pool_before = self.pool.snapshot()\n'),
            ('        except BaseException:\n            self.pool.rollback(pool_before)\n            self.page_ids, self.page_lens, self.offset = cache_before\n            raise\n',
             '        except BaseException as exc:\n            self.pool.rollback(pool_before)\n            self.page_ids, self.page_lens, self.offset = cache_before\n            self._poisoned = f"{type(exc).__name__}: {exc}"\n            raise\n'),
            ('        """This request\'s tokens, dense, each [1, H_kv, offset, D]."""\n',
             '        """This request\'s tokens, dense, each [1, H_kv, offset, D]."""\n        self._check_usable()\n'),
            ('        for page_id in reversed(self.page_ids):\n            self.pool.free_page(page_id)\n',
             '        self._poisoned = None\n        for page_id in reversed(self.page_ids):\n            self.pool.free_page(page_id)\n'),
        ],
    ),
})

VARIANTS["causal_mask_record"] = (
    "the caches hand out mask='causal' as a record of their own (a typing.NamedTuple CausalMask), and "
    "paged_attention knows it by isinstance: None, 'causal' or a CausalMask, anything else is ValueError",
    [("def _is_int(x: object) -> bool:",
      "from typing import NamedTuple\n\n\n"
      "class CausalMask(NamedTuple):\n"
      "    \"\"\"'causal' as the caches hand it out: row i of L sees the context's first n - L + i + 1 keys.\"\"\"\n"
      "    aligned_to: str = 'end'\n\n\n"
      "def _resolved(mask):\n"
      "    return CausalMask() if isinstance(mask, str) and mask == 'causal' else mask\n\n\n"
      "def _is_int(x: object) -> bool:"),
     ("            self.pool.page_size, mask,\n        )\n\n    def gather_dense",
      "            self.pool.page_size, _resolved(mask),\n        )\n\n    def gather_dense"),
     ("            pool.page_size, mask,\n        )",
      "            pool.page_size, _resolved(mask),\n        )"),
     ("    if mask is not None and not (isinstance(mask, str) and mask == \"causal\"):\n"
      "        raise ValueError(f\"mask={mask!r} must be None or 'causal'\")",
      "    if mask is not None and not isinstance(mask, CausalMask) and not (isinstance(mask, str) and mask == \"causal\"):\n"
      "        raise ValueError(f\"mask={mask!r} must be None, 'causal' or a CausalMask\")"),
     ("        rows.append(_attend(query[row], keys, values, scale, mask == \"causal\"))",
      "        causal = isinstance(mask, CausalMask) or (isinstance(mask, str) and mask == \"causal\")\n"
      "        rows.append(_attend(query[row], keys, values, scale, causal))")],
)

VARIANTS["causal_resolved_over_pool_slots"] = (
    "mask_arrays_in_metadata, but the caches' array mask spans the pool's page slots (slot = page id * page_size + "
    "position in the page, as many as the pool's pages hold), and paged_attention reads it at each position's slot",
    VARIANTS["mask_arrays_in_metadata"][1] + [
        ("_as_array_mask(mask, [self.offset], self.block_table(max_pages).shape[-1] * self.pool.page_size, "
         "getattr(self, '_last_len', 1))",
         "_slot_mask(mask, [self.page_ids], [self.offset], self.pool, getattr(self, '_last_len', 1))"),
        ("_as_array_mask(mask, lens, width * pool.page_size, getattr(self, '_last_len', 1))",
         "_slot_mask(mask, table, lens, pool, getattr(self, '_last_len', 1))"),
        ("\n\ndef _as_array_mask(",
         "\n\ndef _slot_mask(mask, table, lens, pool, num_queries):\n"
         "    \"\"\"'causal' as an additive [B, 1, L, slots] array over the pool's page slots: row i of a row of context n "
         "sees the slots of its positions <= n - L + i.\"\"\"\n"
         "    if not (isinstance(mask, str) and mask == 'causal'):\n        return mask\n"
         "    size = pool.page_size\n"
         "    out = [[[[-float('inf')] * (pool.key_pages.shape[0] * size) for _ in range(num_queries)]] for _ in lens]\n"
         "    for b, n in enumerate(lens):\n"
         "        for j in range(n):\n"
         "            for i in range(num_queries):\n"
         "                if j <= n - num_queries + i:\n"
         "                    out[b][0][i][table[b][j // size] * size + j % size] = 0.0\n"
         "    return mx.array(out, dtype=mx.float32)\n\n\n"
         "def _as_array_mask("),
        ("        extra = None if not isinstance(mask, mx.array) else mask[min(row, mask.shape[0] - 1), 0, :, :n]\n",
         "        slots = mx.array([table[row][j // page_size] * page_size + j % page_size for j in range(n)])\n"
         "        extra = None if not isinstance(mask, mx.array) else mask[min(row, mask.shape[0] - 1), 0][:, slots]\n"),
    ],
)

VARIANTS["metadata_valid_until_the_next_append"] = (
    "a paged append's metadata holds its block table and context lengths in the pool's one host staging buffer "
    "(NumPy views), rewritten by the next paged append on that pool (a serving loop's one transfer per step): a "
    "metadata is valid until then, and the course attends over each right after the append that returned it",
    [("import mlx.core as mx\n", "import mlx.core as mx\nimport numpy as np\n"),
     ("        self._free: list[int] = []\n        self.reused_page_allocations = 0\n",
      "        self._free: list[int] = []\n"
      "        self._staging_table = np.full((1, 8), -1, dtype=np.int32)\n"
      "        self._staging_lens = np.zeros(1, dtype=np.int32)\n"
      "        self.reused_page_allocations = 0\n"),
     ("        self.append(key, value)\n        return self.paged_metadata(mask=mask)\n",
      "        self.append(key, value)\n        return self._staged_metadata(mask)\n\n"
      "    def _staged_metadata(self, mask):\n"
      "        width, pool = self.num_pages, self.pool\n"
      "        if pool._staging_table.shape[1] < width:\n"
      "            pool._staging_table = np.full((1, 2 * width), -1, dtype=np.int32)\n"
      "        pool._staging_table[0, :width] = self.page_ids\n"
      "        pool._staging_lens[0] = self.offset\n"
      "        return PagedKvMetadata(pool.key_pages, pool.value_pages, pool._staging_table[:, :width],\n"
      "                               pool._staging_lens, pool.page_size, mask)\n"),
     ("    table, lens = _check_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask)\n",
      "    block_table, context_lens = mx.array(block_table), mx.array(context_lens)\n"
      "    table, lens = _check_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask)\n")],
)

def _caches_hand_out_mask_kind(bases: str, value: str) -> list[tuple[str, str]]:
    """Edits by which the caches hand out mask='causal' as MaskKind.CAUSAL, a member (of value `value`) of an enum
    of their own deriving from `bases`; what paged_attention makes of it is the variant's own edit."""
    return [
        ("def _is_int(x: object) -> bool:",
         "import enum\n\n\n"
         f"class MaskKind({bases}):\n"
         "    \"\"\"The masks the caches hand out.\"\"\"\n"
         f"    CAUSAL = {value}\n\n\n"
         "def _resolved(mask):\n"
         "    return MaskKind.CAUSAL if isinstance(mask, str) and mask == \"causal\" else mask\n\n\n"
         "def _is_int(x: object) -> bool:"),
        ("            self.pool.page_size, mask,\n        )\n\n    def gather_dense",
         "            self.pool.page_size, _resolved(mask),\n        )\n\n    def gather_dense"),
        ("            pool.page_size, mask,\n        )",
         "            pool.page_size, _resolved(mask),\n        )"),
    ]


VARIANTS["str_enum_mask"] = (
    "the caches hand out mask='causal' as a member of a str enum of their own (MaskKind.CAUSAL), and paged_attention "
    "takes the mask as the caches hand it out: once the metadata is validated, a plain string is refused (the course "
    "passes 'causal' itself only in calls it expects to be rejected for their metadata)",
    [*_caches_hand_out_mask_kind("str, enum.Enum", "\"causal\""),
     ("    _check_metadata(table, lens, query.shape[2], page_size, key_pages.shape[0])\n",
      "    _check_metadata(table, lens, query.shape[2], page_size, key_pages.shape[0])\n"
      "    if isinstance(mask, str) and not isinstance(mask, MaskKind):\n"
      "        raise ValueError(f\"mask={mask!r}: pass the mask a cache's metadata carries (MaskKind.CAUSAL)\")\n")],
)

# What the course hands its assert_allclose and its dense attention must be arrays: a.dtype and .shape are read
# first, whatever the numbers.
FORGING_VARIANTS["gather_dense_returns_lists"] = (
    "gather_dense() returns the dense keys and values as nested Python lists (.tolist(), for the host side); "
    "update_and_fetch still returns arrays: the course's rewind test hands them to assert_allclose ('list' object "
    "has no attribute 'dtype') and its attention tests to its dense attention (no attribute 'shape'): course 4 "
    "failed, while the suite converted them with np.asarray",
    [
        ("        self.append(key, value)\n        keys, values = self.gather_dense()\n"
         "        return keys, values, self.offset, mask",
         "        self.append(key, value)\n"
         "        return self._gather(self.pool.key_pages), self._gather(self.pool.value_pages), self.offset, mask"),
        ("        return self._gather(self.pool.key_pages), self._gather(self.pool.value_pages)\n\n",
         "        return self._gather(self.pool.key_pages).tolist(), self._gather(self.pool.value_pages).tolist()\n\n"),
    ],
    "pagecheck.invariants.test_context_len::test_the_courses_prefill_after_an_append",
)
FORGING_VARIANTS["float32_attention_returns_lists"] = (
    "paged_attention returns a float32 output as nested Python lists (.tolist()) and a bfloat16 one as an MLX "
    "array: the course's prefill and batch tests hand the float32 output to assert_allclose, which reads its dtype "
    "first (course 2 failed); the suite converted it with np.asarray (the grader's worker refuses a list already)",
    [
        ("    return mx.stack(rows).astype(query.dtype)",
         "    out = mx.stack(rows).astype(query.dtype)\n"
         "    return out if out.dtype == mx.bfloat16 else out.tolist()"),
    ],
    "pagecheck.invariants.test_context_len::test_the_courses_prefill_after_an_append",
)

# The course snapshots a pool's used ids as frozenset(pool.used_page_ids): items hashed by identity never compare
# equal across two reads.
FORGING_VARIANTS["used_page_ids_as_an_mlx_array"] = (
    "pool.used_page_ids is an MLX int32 array (the live pages as the device sees them): iterating it gives new 0-d "
    "arrays, hashed by identity, so the course's snapshot frozenset(pool.used_page_ids) differs between any two reads "
    "while a page is live; its dtype-rejection test, whose cache holds a page, fails its `_paged_state(cache) == "
    "before` (course 1 failed) where the suite compared the ids as ints",
    [
        ("        free = set(self._free)\n"
         "        return [page_id for page_id in range(self._num_issued) if page_id not in free]",
         "        free = set(self._free)\n"
         "        return mx.array([page_id for page_id in range(self._num_issued) if page_id not in free], dtype=mx.int32)"),
        ("        live = self.used_page_ids\n        if live:",
         "        live = self.used_page_ids.tolist()\n        if live:"),
    ],
    "pagecheck.invariants.test_rejection::test_pool_and_cache_reject_bad_calls_unchanged[append_dtype_differs_from_pool]",
)

VARIANTS["decode_needs_a_prefilled_cache"] = (
    "a one-token update_and_fetch_paged is a decode step and needs a prefilled request: on an empty cache it is "
    "ValueError before anything changes (a prompt's first token goes through update_and_fetch, or in a chunk of "
    "more); every one-token paged append of the course extends a context, and it opens caches through "
    "update_and_fetch_paged with 3, 4, 5 or 17 tokens",
    [("        self.append(key, value)\n        return self.paged_metadata(mask=mask)\n",
      "        if self.offset == 0 and key.shape[2] == 1:\n"
      "            raise ValueError(\"update_and_fetch_paged: a decode step (one token) needs a prefilled request\")\n"
      "        self.append(key, value)\n        return self.paged_metadata(mask=mask)\n")],
)

VARIANTS["decode_takes_its_next_page_ahead"] = (
    'a one-token update_and_fetch_paged (a decode) that fills its tail page takes the next page ahead, '
    "held in reserve (not in page_ids), so the next step allocates nothing; the cache's next new page is "
    "that one, and rewind and release give it back first. The course never counts a pool's pages after "
    "such a decode (its block-table test reads only the table's identity; its batch appends below "
    'update_and_fetch_paged)',
    [
        ('        self._table: mx.array | None = None\n'
         '\n'
         '    @property\n'
         '    def num_pages(self) -> int:\n'
         '        return len(self.page_ids)\n',
         '        self._table: mx.array | None = None\n'
         '        self._reserve: int | None = None  # a page taken ahead for the next decode step\n'
         '\n'
         '    @property\n'
         '    def num_pages(self) -> int:\n'
         '        return len(self.page_ids)\n'),
        ('        self.append(key, value)\n'
         '        return self.paged_metadata(mask=mask)\n',
         '        self.append(key, value)\n'
         '        if key.shape[2] == 1 and self._reserve is None and self.page_lens[-1] == self.pool.page_size:\n'
         "            self._reserve = self.pool.allocate_page()  # the next decode step's page, taken ahead\n"
         '        return self.paged_metadata(mask=mask)\n'),
        ('        cache_before = (list(self.page_ids), list(self.page_lens), self.offset)\n'
         '        try:\n'
         '            self._write(key, value)\n'
         '        except BaseException:\n'
         '            self.pool.rollback(pool_before)\n'
         '            self.page_ids, self.page_lens, self.offset = cache_before\n'
         '            raise\n',
         '        cache_before = (list(self.page_ids), list(self.page_lens), self.offset, self._reserve)\n'
         '        try:\n'
         '            self._write(key, value)\n'
         '        except BaseException:\n'
         '            self.pool.rollback(pool_before)\n'
         '            self.page_ids, self.page_lens, self.offset, self._reserve = cache_before\n'
         '            raise\n'),
        ('                self.page_ids.append(self.pool.allocate_page())\n'
         '                self.page_lens.append(0)\n',
         '                if self._reserve is not None:\n'
         '                    page_id, self._reserve = self._reserve, None\n'
         '                else:\n'
         '                    page_id = self.pool.allocate_page()\n'
         '                self.page_ids.append(page_id)\n'
         '                self.page_lens.append(0)\n'),
        ('            raise ValueError(f"rewind n={n!r} must be an integer in [0, offset={self.offset}]")\n'
         '        left = n\n',
         '            raise ValueError(f"rewind n={n!r} must be an integer in [0, offset={self.offset}]")\n'
         '        if n and self._reserve is not None:\n'
         '            self.pool.free_page(self._reserve)\n'
         '            self._reserve = None\n'
         '        left = n\n'),
        ('        for page_id in reversed(self.page_ids):\n'
         '            self.pool.free_page(page_id)\n'
         '        self.page_ids, self.page_lens, self.offset = [], [], 0\n',
         '        if self._reserve is not None:\n'
         '            self.pool.free_page(self._reserve)\n'
         '            self._reserve = None\n'
         '        for page_id in reversed(self.page_ids):\n'
         '            self.pool.free_page(page_id)\n'
         '        self.page_ids, self.page_lens, self.offset = [], [], 0\n'),
    ],
)

VARIANTS["float32_decodes_only_in_a_batch"] = (
    "float32 attention serves one-row queries (decode) only in a batch (B > 1): a float32 decode of one request is "
    "NotImplementedError once validated (the course decodes float32 only in its batch of 3; its one-request calls "
    "are a float32 prefill of 3 rows and a bfloat16 decode)",
    [("    batch, num_q_heads, num_queries, head_dim = query.shape\n    scale = head_dim**-0.5 if scale is None else scale\n",
      "    batch, num_q_heads, num_queries, head_dim = query.shape\n"
      "    if query.dtype == mx.float32 and num_queries == 1 and batch == 1:\n"
      "        raise NotImplementedError('float32 decode runs batched (B > 1) only')\n"
      "    scale = head_dim**-0.5 if scale is None else scale\n")],
)

VARIANTS["page_ids_live_view"] = (
    "page_ids is a read-only view of the cache's own id list (==, iteration, len, indexing and slicing, all the "
    "course uses: its bfloat16 decode test compares cache.page_ids[:2] with a list)",
    [
        ("self.page_ids", "self._ids"),
        ('\n'
         'class TinyKvPagedCache:\n',
         '\n'
         'class PageIdsView:\n'
         '    """A read-only view of a cache\'s page ids: callers read them (==, iteration, len, indexing, slicing) but\n'
         '    cannot change the cache\'s own list, and never hold a stale copy."""\n'
         '\n'
         '    __slots__ = ("_ids",)\n'
         '\n'
         '    def __init__(self, ids: list[int]) -> None:\n'
         '        self._ids = ids\n'
         '\n'
         '    def __len__(self) -> int:\n'
         '        return len(self._ids)\n'
         '\n'
         '    def __getitem__(self, i):\n'
         '        return self._ids[i]\n'
         '\n'
         '    def __iter__(self):\n'
         '        return iter(self._ids)\n'
         '\n'
         '    def __eq__(self, other: object) -> bool:\n'
         '        if isinstance(other, PageIdsView):\n'
         '            other = other._ids\n'
         '        return self._ids == other\n'
         '\n'
         '    __hash__ = None\n'
         '\n'
         '    def __repr__(self) -> str:\n'
         '        return f"PageIdsView({self._ids!r})"\n'
         '\n'
         '\n'
         'class TinyKvPagedCache:\n'),
        ('    def num_pages(self) -> int:\n'
         '        return len(self._ids)\n',
         '    def num_pages(self) -> int:\n'
         '        return len(self._ids)\n'
         '\n'
         '    @property\n'
         '    def page_ids(self) -> PageIdsView:\n'
         '        return PageIdsView(self._ids)\n'
         '\n'
         '    @page_ids.setter\n'
         '    def page_ids(self, ids: list[int]) -> None:\n'
         '        self._ids = list(ids)\n'),
    ],
)

VARIANTS["value_and_runtime_error_class"] = (
    "an append whose page write fails is rolled back and re-raised as a PagedKvError, an error class that is both a "
    "ValueError (a bad input) and a RuntimeError (a failed operation), its message keeping the failure's (the "
    "course's pytest.raises(RuntimeError, match=...) takes it)",
    [
        ("def _dtype_name(dtype: mx.Dtype) -> str:\n",
         "class PagedKvError(ValueError, RuntimeError):\n"
         '    """Every error of the paged KV cache: a bad input (a ValueError) or a failed operation (a RuntimeError)."""\n'
         "\n"
         "\n"
         "def _dtype_name(dtype: mx.Dtype) -> str:\n"),
        ("        except BaseException:\n"
         "            self.pool.rollback(pool_before)\n"
         "            self.page_ids, self.page_lens, self.offset = cache_before\n"
         "            raise\n",
         "        except BaseException as exc:\n"
         "            self.pool.rollback(pool_before)\n"
         "            self.page_ids, self.page_lens, self.offset = cache_before\n"
         "            if isinstance(exc, Exception):\n"
         '                raise PagedKvError(f"append rolled back: {exc}") from exc\n'
         "            raise\n"),
    ],
)

VARIANTS["failed_append_raises_its_own_error"] = (
    "an append whose page write fails is rolled back and raises a RuntimeError of its own ('append of N tokens "
    "failed and was rolled back'), the failure's own message attached as a PEP 678 note (the course's "
    "pytest.raises(RuntimeError, match=...) reads notes too)",
    [('        except BaseException:\n'
      '            self.pool.rollback(pool_before)\n'
      '            self.page_ids, self.page_lens, self.offset = cache_before\n'
      '            raise\n',
      '        except Exception as exc:\n'
      '            self.pool.rollback(pool_before)\n'
      '            self.page_ids, self.page_lens, self.offset = cache_before\n'
      '            error = RuntimeError(f"append of {key.shape[2]} tokens failed and was rolled back")\n'
      '            error.add_note(f"cause: {type(exc).__name__}: {exc}")\n'
      '            raise error from exc\n')],
)

VARIANTS["balanced_new_pages"] = (
    "update_and_fetch_paged spreads the tokens of an append that open new pages evenly over those pages (5 tokens "
    "on an empty cache: [3, 2]), after filling the tail page; gather_dense() reads each page's own fill. The metadata "
    "of such an append is wrong for a kernel that reads pages full but the last: the course reads tokens only after "
    "paged appends that open one new page at most (its 5 and 17 tokens only through counts and shapes)",
    [('        self.append(key, value)\n'
      '        return self.paged_metadata(mask=mask)\n',
      '        self.append(key, value, balanced=True)\n'
      '        return self.paged_metadata(mask=mask)\n'),
     ('    def append(self, key: mx.array, value: mx.array) -> None:\n',
      '    def append(self, key: mx.array, value: mx.array, balanced: bool = False) -> None:\n'),
     ('            self._write(key, value)\n        except BaseException:\n',
      '            self._write(key, value, balanced)\n        except BaseException:\n'),
     ('    def _write(self, key: mx.array, value: mx.array) -> None:\n'
      '        page_size = self.pool.page_size\n'
      '        length = key.shape[2]\n'
      '        written = 0\n'
      '        while written < length:\n'
      '            if not self.page_ids or self.page_lens[-1] == page_size:\n'
      '                self.page_ids.append(self.pool.allocate_page())\n'
      '                self.page_lens.append(0)\n'
      '            start = self.page_lens[-1]\n'
      '            stop = written + min(page_size - start, length - written)\n'
      '            self.pool.write_page_slice(self.page_ids[-1], start, key[:, :, written:stop], value[:, :, written:stop])\n'
      '            self.page_lens[-1] += stop - written\n'
      '            self.offset += stop - written\n'
      '            written = stop\n',
      '    def _write(self, key: mx.array, value: mx.array, balanced: bool = False) -> None:\n'
      '        page_size = self.pool.page_size\n'
      '        length = key.shape[2]\n'
      '        spans = []  # (a new page?, tokens)\n'
      '        if self.page_ids and self.page_lens[-1] < page_size:\n'
      '            spans.append((False, min(page_size - self.page_lens[-1], length)))\n'
      '        rest = length - sum(n for _, n in spans)\n'
      '        if rest:\n'
      '            k = -(-rest // page_size)\n'
      '            if balanced:  # the tokens that need new pages spread evenly over them\n'
      '                sizes = [rest // k + (1 if i < rest % k else 0) for i in range(k)]\n'
      '            else:\n'
      '                sizes = [page_size] * (k - 1) + [rest - (k - 1) * page_size]\n'
      '            spans += [(True, n) for n in sizes]\n'
      '        written = 0\n'
      '        for new, n in spans:\n'
      '            if new:\n'
      '                self.page_ids.append(self.pool.allocate_page())\n'
      '                self.page_lens.append(0)\n'
      '            start, stop = self.page_lens[-1], written + n\n'
      '            self.pool.write_page_slice(self.page_ids[-1], start, key[:, :, written:stop], value[:, :, written:stop])\n'
      '            self.page_lens[-1] += n\n'
      '            self.offset += n\n'
      '            written = stop\n'),
     ('        picked = pages[mx.array(self.page_ids, dtype=mx.int32)] if self.page_ids else pages[:0]\n'
      '        tokens = picked.transpose(1, 0, 2, 3).reshape(num_heads, self.num_pages * page_size, head_dim)\n'
      '        return tokens[None, :, : self.offset]\n',
      '        parts = [pages[p][:, :n] for p, n in zip(self.page_ids, self.page_lens)]\n'
      '        if not parts:\n'
      '            return pages[:0].transpose(1, 0, 2, 3).reshape(num_heads, 0, head_dim)[None]\n'
      '        return mx.concatenate(parts, axis=1)[None]\n')],
)

VARIANTS["int_enum_mask"] = (
    "the caches hand out mask='causal' as a member of an int enum of their own (MaskKind.CAUSAL = 1), and "
    "paged_attention takes the mask only as the caches hand it out (isinstance), refusing a plain string or int once "
    "the metadata is validated: the course passes every paged call it expects to succeed the mask its metadata carries",
    [*_caches_hand_out_mask_kind("enum.IntEnum", "1"),
     ("    if mask is not None and not (isinstance(mask, str) and mask == \"causal\"):\n",
      "    if mask is not None and not (isinstance(mask, MaskKind) or (isinstance(mask, str) and mask == \"causal\")):\n"),
     ("    _check_metadata(table, lens, query.shape[2], page_size, key_pages.shape[0])\n",
      "    _check_metadata(table, lens, query.shape[2], page_size, key_pages.shape[0])\n"
      "    if mask is not None and not isinstance(mask, MaskKind):\n"
      "        raise ValueError(f\"mask={mask!r} must be None or MaskKind.CAUSAL, as a cache's metadata carries it\")\n"),
     ("        rows.append(_attend(query[row], keys, values, scale, mask == \"causal\"))",
      "        rows.append(_attend(query[row], keys, values, scale, mask is MaskKind.CAUSAL))")],
)

VARIANTS["host_page_table"] = (
    "block tables stay on the host as a list subclass of their own (PageTable: rows of ids, with the .shape and "
    ".tolist() the course reads), made by the caches and turned into an int32 array by paged_attention; tables the "
    "caller builds as arrays are taken as they are",
    [("def _is_int(x: object) -> bool:",
      "class PageTable(list):\n"
      "    \"\"\"A block table kept on the host: rows of page ids, -1 past each row's pages.\"\"\"\n\n"
      "    @property\n"
      "    def shape(self) -> tuple[int, int]:\n"
      "        return (len(self), len(self[0]) if self else 0)\n\n"
      "    def tolist(self) -> list[list[int]]:\n"
      "        return [list(row) for row in self]\n\n\n"
      "def _is_int(x: object) -> bool:"),
     ("            self._table = mx.array([self.page_ids + [SENTINEL] * (width - self.num_pages)], dtype=mx.int32)\n",
      "            self._table = PageTable([self.page_ids + [SENTINEL] * (width - self.num_pages)])\n"),
     ("            pool.key_pages, pool.value_pages, mx.array(table, dtype=mx.int32), mx.array(lens, dtype=mx.int32),\n",
      "            pool.key_pages, pool.value_pages, PageTable(table), mx.array(lens, dtype=mx.int32),\n"),
     ("    table, lens = _check_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask)\n",
      "    if isinstance(block_table, PageTable):\n"
      "        block_table = mx.array(block_table.tolist(), dtype=mx.int32)\n"
      "    table, lens = _check_inputs(query, key_pages, value_pages, block_table, context_lens, page_size, mask)\n")],
)

def _host_page_table_with(*changes: tuple[str, str]) -> list[tuple[str, str]]:
    """host_page_table's edits, each (text, instead) of `changes` made in the replacements (each text is found)."""
    edits = VARIANTS["host_page_table"][1]
    for text, _ in changes:
        assert any(text in new for _, new in edits), f"host_page_table writes no {text!r}"
    for text, instead in changes:
        edits = [(old, new.replace(text, instead)) for old, new in edits]
    return edits


# The course reads a block table's own .shape, which must equal a tuple.
FORGING_VARIANTS["host_page_table_with_a_list_shape"] = (
    "host_page_table, its table's .shape a list ([3, 2]): the course's batch test compares it with (3, 2) and fails "
    "(course: 1 failed), while the suite read the shape of the array it made from the table's .tolist()",
    _host_page_table_with(("        return (len(self), len(self[0]) if self else 0)\n",
                           "        return [len(self), len(self[0]) if self else 0]\n")),
    "pagecheck.invariants.test_batching_cache::test_the_courses_batch_of_two_requests_and_an_empty_slot",
)

# The course compares a pool's counters with int's own ==, in the worker's process.
FORGING_VARIANTS["free_page_count_whose_int_lies"] = (
    "num_free_pages one too many (a freed page counted twice), as an int subclass whose __int__ and __index__ "
    "answer one less: the course's == compares the number itself and fails (course: 3 failed), while in the sandbox "
    "the counter crossed the worker's pipe as what its __int__ answered, so every course clause passed there",
    [("def _is_int(x: object) -> bool:",
      "class _Count(int):\n"
      "    def __int__(self):\n"
      "        return int.__int__(self) - 1\n\n"
      "    __index__ = __int__\n\n\n"
      "def _is_int(x: object) -> bool:"),
     ("    def num_free_pages(self) -> int:\n        return len(self._free)\n",
      "    def num_free_pages(self) -> int:\n        return _Count(len(self._free) + 1)\n")],
    "pagecheck.invariants.test_page_storage::test_reset_empties_an_idle_pool",
)

# The course slices a cache's page_ids in the worker's process, through the list's own __getitem__.
FORGING_VARIANTS["page_ids_slice_as_tuples"] = (
    "a cache's page_ids a list subclass whose __getitem__ gives a slice as a tuple: the course's "
    "cache.page_ids[:2] == [0, 1] fails (course: 1 failed), while in the sandbox the list crossed the worker's pipe "
    "as its items (its __iter__), so every course clause passed there",
    [("def _is_int(x: object) -> bool:",
      "class _Ids(list):\n"
      "    def __getitem__(self, i):\n"
      "        got = list.__getitem__(self, i)\n"
      "        return tuple(got) if isinstance(i, slice) else got\n\n\n"
      "def _is_int(x: object) -> bool:"),
     ("        self.page_ids: list[int] = []\n", "        self.page_ids: list[int] = _Ids()\n"),
     ("self.page_ids, self.page_lens, self.offset = [], [], 0",
      "self.page_ids, self.page_lens, self.offset = _Ids(), [], 0"),
     ("            self.page_ids, self.page_lens, self.offset = cache_before\n",
      "            self.page_ids, self.page_lens, self.offset = _Ids(cache_before[0]), *cache_before[1:]\n")],
    "pagecheck.invariants.test_lazy_tail::test_a_decode_after_another_request_takes_the_next_page",
)

# The course compares a table's own .tolist() with lists.
FORGING_VARIANTS["host_page_table_lists_tuples"] = (
    "host_page_table, its table's .tolist() a list of tuples ([(0, 1)]): the course's asserts compare it with "
    "[[0, 1]] and a row with [-1, -1] and fail (course: 2 failed), while the suite compared the values of the array "
    "it made from it",
    _host_page_table_with(("        return [list(row) for row in self]\n", "        return [tuple(row) for row in self]\n")),
    "pagecheck.invariants.test_context_len::test_the_courses_prefill_after_an_append",
)

FORGING_VARIANTS["host_page_table_without_tolist"] = (
    "host_page_table, its table without .tolist() (paged_attention reads its rows): the course's asserts call "
    "metadata.block_table.tolist() and fail (course: 2 failed), while the suite read the rows themselves",
    _host_page_table_with(("    def tolist(self) -> list[list[int]]:\n        return [list(row) for row in self]\n", ""),
                          ("mx.array(block_table.tolist(), dtype=mx.int32)",
                           "mx.array([list(row) for row in block_table], dtype=mx.int32)")),
    "pagecheck.invariants.test_batching_cache::test_the_courses_batch_of_two_requests_and_an_empty_slot",
)

# The course hands the attention the table object the cache handed out, not an array made from its .tolist().
FORGING_VARIANTS["host_page_table_read_apart_from_its_tolist"] = (
    "host_page_table, whose attention reads a PageTable's first row for every row (its .tolist() is right): the "
    "course's batch attends over the PageTable itself and fails (course: 1 failed), while the suite handed the "
    "attention the MLX array it made from the table's .tolist()",
    _host_page_table_with(("        block_table = mx.array(block_table.tolist(), dtype=mx.int32)\n",
                           "        block_table = mx.array([block_table.tolist()[0]] * len(block_table), dtype=mx.int32)\n")),
    "pagecheck.invariants.test_batching_cache::test_the_courses_batch_of_two_requests_and_an_empty_slot",
)

VARIANTS["batch_max_seq_len_counts_every_token"] = (
    "int_enum_mask, and BatchingKvCache reads max_seq_len as its budget of tokens in all: a step after which its "
    "requests would hold more than max_seq_len tokens together is ValueError before anything changes (the course's "
    "batch holds 4 + 7 under its 16; its mixed pools hold none under 8)",
    VARIANTS["int_enum_mask"][1] + [
        ("        length = keys.shape[2]\n        for slot in active:",
         "        length = keys.shape[2]\n"
         "        total = sum(self.kv_caches[slot].offset + length for slot in active)\n"
         "        if self.max_seq_len is not None and total > self.max_seq_len:\n"
         "            raise ValueError(f\"the batch would hold {total} tokens, over its max_seq_len={self.max_seq_len}\")\n"
         "        for slot in active:")],
)

# The batch step a course case of its own asks of the subject's batch (calls.the_subjects_own_metadata), the same
# int_enum_mask whose attention takes only the mask its caches hand out: what that batch refuses, the course case
# cannot judge over the layout with a plain "causal" either.
_BATCH_STEP = "        length = keys.shape[2]\n        for slot in active:"
VARIANTS["batch_max_seq_len_counts_every_page"] = (
    "int_enum_mask, and BatchingKvCache reads max_seq_len as its budget of pages in all (max_seq_len // page_size "
    "pages over all its requests): a step after which its requests would hold more pages together is ValueError "
    "before anything changes (the course's batch holds 1 + 2 pages under its 16 // 4)",
    VARIANTS["int_enum_mask"][1] + [
        (_BATCH_STEP,
         "        length = keys.shape[2]\n"
         "        page_size = self.kv_caches[active[0]].pool.page_size\n"
         "        pages = sum(-(-(self.kv_caches[slot].offset + length) // page_size) for slot in active)\n"
         "        if self.max_seq_len is not None and pages > self.max_seq_len // page_size:\n"
         "            raise ValueError(f\"the batch would hold {pages} pages, over its max_seq_len={self.max_seq_len}\")\n"
         "        for slot in active:")],
)
VARIANTS["batch_max_seq_len_in_whole_pages"] = (
    "int_enum_mask, and BatchingKvCache's max_seq_len must be a whole number of its requests' pages (a request's "
    "room is max_seq_len // page_size pages): another is ValueError at the first step (the course's 16 and 8 are "
    "whole numbers of its pages of 4)",
    VARIANTS["int_enum_mask"][1] + [
        (_BATCH_STEP,
         "        length = keys.shape[2]\n"
         "        page_size = self.kv_caches[active[0]].pool.page_size\n"
         "        if self.max_seq_len is not None and self.max_seq_len % page_size:\n"
         "            raise ValueError(f\"max_seq_len={self.max_seq_len} is no whole number of pages of {page_size}\")\n"
         "        for slot in active:")],
)
# A refusal no course case's layout stays clear of (its batch's rows hold 3 pages): where the caches refuse to
# write a layout, the course case calls over the layout with the mask they hand out at the course's own call.
VARIANTS["batch_rows_of_at_most_2_pages"] = (
    "int_enum_mask, and BatchingKvCache keeps each request's table row in a fixed room of 2 pages "
    "(max_blocks_per_seq = 2; its metadata is still exactly as wide as its widest row): a step after which a request "
    "would hold a third page is ValueError before anything changes (the course's batched requests hold 1 and 2 pages)",
    VARIANTS["int_enum_mask"][1] + [
        (_BATCH_STEP,
         "        length = keys.shape[2]\n"
         "        page_size = self.kv_caches[active[0]].pool.page_size\n"
         "        for slot in active:\n"
         "            if -(-(self.kv_caches[slot].offset + length) // page_size) > 2:\n"
         "                raise ValueError(f\"slot {slot} would need a third page, past the batch's room of 2 a row\")\n"
         "        for slot in active:")],
)
VARIANTS["dense_appends_of_at_most_2_pages"] = (
    "int_enum_mask, and update_and_fetch (the dense path) takes at most two pages of tokens a call (its gather "
    "buffer): a longer chunk is NotImplementedError before anything changes (the course's longest are 6 tokens in "
    "pages of 4 and 64 in pages of 32)",
    VARIANTS["int_enum_mask"][1] + [
        ("        \"\"\"Append, then return this request's keys and values dense [1, H_kv, offset, D], the offset and the mask.\"\"\"\n"
         "        self.append(key, value)\n",
         "        \"\"\"Append, then return this request's keys and values dense [1, H_kv, offset, D], the offset and the mask.\"\"\"\n"
         "        if key.shape[2] > 2 * self.pool.page_size:\n"
         "            raise NotImplementedError(f\"update_and_fetch takes at most 2 pages of tokens, got {key.shape[2]}\")\n"
         "        self.append(key, value)\n")],
)

VARIANTS["float_page_count"] = (
    "pool.num_pages is a float (2.0): the course compares it with ints only (pool.num_pages == 2, "
    "pool.key_pages.shape[0] == pool.num_pages)",
    [('        """Page ids issued so far, live or free."""\n        return self._num_issued',
      '        """Page ids issued so far, live or free."""\n        return float(self._num_issued)')],
)

# The course reads a block table's own .shape, which must equal a tuple: also that of an array subclass.
_ARRAY_TABLE = "pool.key_pages, pool.value_pages, mx.array(table, dtype=mx.int32), mx.array(lens, dtype=mx.int32),"
FORGING_VARIANTS["numpy_table_subclass_with_a_list_shape"] = (
    "the batch's block_table a NumPy int32 array of a subclass whose .shape property answers a list ([3, 2]); the "
    "attention reads it as an MLX array: the course's batch test compares the shape with (3, 2) and fails (course: "
    "1 failed), while in the sandbox the table crossed the worker's pipe as a plain array, its own .shape lost",
    [("import mlx.core as mx\n",
      "import mlx.core as mx\nimport numpy as np\n\n\n"
      "class _ListShape(np.ndarray):\n"
      "    @property\n"
      "    def shape(self):\n"
      "        return list(np.ndarray.shape.__get__(self))\n"),
     (_ARRAY_TABLE,
      "pool.key_pages, pool.value_pages, np.array(table, dtype=np.int32).view(_ListShape), "
      "mx.array(lens, dtype=mx.int32),"),
     ("    table, lens = _check_inputs(query,",
      "    if isinstance(block_table, np.ndarray):\n"
      "        block_table = mx.array(np.ndarray.view(block_table, np.ndarray))\n"
      "    table, lens = _check_inputs(query,")],
    "pagecheck.invariants.test_batching_cache::test_the_courses_batch_of_two_requests_and_an_empty_slot",
)

# An edit adding an MLX array subclass whose .shape answers a list.
_LIST_SHAPE_CLASS = ("import mlx.core as mx\n",
                     "import mlx.core as mx\n\n\n"
                     "class _ListShape(mx.array):\n"
                     "    @property\n"
                     "    def shape(self):\n"
                     "        return list(mx.array.shape.__get__(self))\n")

FORGING_VARIANTS["mlx_table_subclass_with_a_list_shape"] = (
    "the batch's block_table an MLX int32 array of a subclass whose .shape property answers a list ([3, 2]): the "
    "course's batch test compares the shape with (3, 2) and fails (course: 1 failed), while the suite read the shape "
    "of a NumPy copy (and in the sandbox the table crossed the worker's pipe as a plain array)",
    [_LIST_SHAPE_CLASS,
     (_ARRAY_TABLE,
      "pool.key_pages, pool.value_pages, _ListShape(mx.array(table, dtype=mx.int32)), "
      "mx.array(lens, dtype=mx.int32),")],
    "pagecheck.invariants.test_batching_cache::test_the_courses_batch_of_two_requests_and_an_empty_slot",
)

# The course compares a metadata's pages' own .shape with a tuple.
FORGING_VARIANTS["pages_with_a_list_shape"] = (
    "a cache's metadata hands out its pool's pages as MLX arrays of a subclass whose .shape property answers a list "
    "([2, 2, 4, 4]): the course's prefill test compares it with (2, 2, page_size, 4) and fails (course: failed), "
    "while the suite compared tuple(shape)",
    [_LIST_SHAPE_CLASS,
     ("            self.pool.key_pages, self.pool.value_pages, self.block_table(max_pages), self.context_lens(),",
      "            _ListShape(self.pool.key_pages), _ListShape(self.pool.value_pages), self.block_table(max_pages), "
      "self.context_lens(),")],
    "pagecheck.invariants.test_context_len::test_the_courses_prefill_after_an_append",
)
