"""The invariants and contract clauses pagecheck checks: one id, one line each.

Every check carries `@pytest.mark.invariant(<id>)` with an id from this table,
and results and reports group by these ids (and, beside it, its relation to
the course's own tests: invariants/course.py). The first five are the paged-KV
invariants of the course; the rest are clauses of the paged-attention
correctness contract. Each id has its own module, invariants/test_<id>.py.
"""

from __future__ import annotations

SEED_INVARIANTS: dict[str, str] = {
    "context_len": "context_lens() equals the tokens written after every prefill chunk and decode step, "
    "and attention reads exactly that many keys",
    "block_table_order": "the block table gathers K/V in logical order; causal output follows page order, "
    "decode over complete pages does not",
    "alias_free": "live caches on one pool hold disjoint pages, and writing one request never changes another's output",
    "release_once": "releasing a request returns every page of every layer exactly once; a second free is rejected",
    "lazy_tail": "a cache holds ceil(context / page_size) pages; a new page appears only when the tail is full, "
    "and the pool reuses freed pages before issuing new ones",
}

CONTRACT_CLAUSES: dict[str, str] = {
    "rejection": "invalid inputs raise ValueError (advised to name the field), and a rejected call, or an append "
    "whose page write fails, leaves inputs, pool and cache unchanged",
    "gqa_mapping": "query head h reads kv head h // (H_q / H_kv), for group sizes 1 to 8",
    "head_dims": "head dims 32, 64 and 128 match the reference with the default scale D**-0.5",
    "dtypes": "float32, bfloat16 and float16 match the float64 reference within the tolerance table",
    "page_sizes": "page sizes 1, 3, 16, 128 and larger match the reference",
    "page_boundaries": "contexts of k*page_size - 1, k*page_size and k*page_size + 1 match the reference",
    "dispatch_paths": "query lengths on both sides of the decode/prefill split (L <= 8 and L > 8) match the reference",
    "softmax_stability": "large logits give finite outputs that match the reference",
    "empty_rows": "rows with context 0 and an all -1 table row give zeros and leave live rows correct",
    "inputs_unchanged": "paged_attention leaves every input array unchanged",
    "batch_consistency": "each row of a batched call equals the call for that request alone",
    "batching_cache": "BatchingKvCache metadata pads rows with -1 to the widest row, gives empty slots context 0 "
    "and counts every token of a prefill chunk; requests on two pools are refused",
    "page_storage": "page storage starts at 4 pages and doubles, counting growths and copies; materialize() "
    "evaluates it without a dense gather; reset() empties an idle pool",
}

INVARIANTS: dict[str, str] = {**SEED_INVARIANTS, **CONTRACT_CLAUSES}


def check_invariant_id(invariant: str) -> str:
    if invariant not in INVARIANTS:
        raise ValueError(f"invariant={invariant!r} is not in the catalog: {sorted(INVARIANTS)}")
    return invariant
