"""Where to start reading a failed conformance run: the broken invariant most likely to be the cause.

One planted bug breaks many invariants: attention that reads one key too few
fails the context-length checks and, through them, nearly every check that
compares an output. CAUSE_PRECEDENCE ranks the invariants so that a failure
of an earlier one can explain failures of later ones, never the other way
round; broken invariants are listed in that order, and the first is where to
start. Its first failing check (in node-id order, failures before errors)
is shown with its counterexample and a command that reruns it.

The order, and why (each entry's reason is printed in the report):
- The pool's storage comes first (page_storage): every cache draws its pages
  from it. Then the cache's own bookkeeping. A cache that allocates pages
  early or late (lazy_tail) or returns them wrongly (release_once) hands
  every later check wrong block tables or a corrupt pool, and in the mutant
  gallery such bugs also break context_len and alias_free.
- Then what every attention check depends on: how many keys are read
  (context_len), in which order (block_table_order), in which dtype (dtypes).
- Then the isolation of caches (alias_free), which output bugs break too.
- Then the narrower clauses, the more specific ones later: a head mapping
  or a head-dim bug fails page-size, boundary and dispatch checks as well.
- Last, clauses nothing else depends on: inputs left unchanged, rejection.

A ranking is a guess about causes: when the attention arithmetic itself is
wrong (a scale, a merge, a mask), every output check fails and the first
broken invariant in this order is where its symptoms show first, not the
clause the bug belongs to. The report says "likely".
"""

from __future__ import annotations

from typing import Any

from pagecheck.invariants.catalog import INVARIANTS

# (invariant id, what its failure explains), most basic first. Covers every catalog invariant.
CAUSE_PRECEDENCE: tuple[tuple[str, str], ...] = (
    ("page_storage", "a pool whose storage grows, resets or counts wrongly hands every cache pages it does not have"),
    ("lazy_tail", "a cache with the wrong number of pages gives every later check block tables of the wrong length"),
    ("release_once", "pages returned twice or never corrupt the pool that every later cache draws from"),
    ("context_len", "attention that reads too many or too few keys fails every check that compares an output"),
    ("block_table_order", "K/V read out of page order fail every causal and multi-page output"),
    ("dtypes", "a dtype computed wrongly fails every check drawn in that dtype"),
    ("alias_free", "pages shared between live caches corrupt every check with more than one request"),
    ("gqa_mapping", "query heads reading the wrong K/V head fail every check with H_q > H_kv"),
    ("head_dims", "a head dim or scale handled wrongly fails every check drawn with that head dim"),
    ("page_sizes", "a page size handled wrongly fails every check drawn with that page size"),
    ("page_boundaries", "contexts that end at or just past a page edge fail wherever such contexts are drawn"),
    ("dispatch_paths", "one schedule (decode or prefill) wrong fails every check whose query length takes it"),
    ("softmax_stability", "overflow on large logits fails only checks that draw large values"),
    ("empty_rows", "rows with context 0 fail only batches that contain them"),
    ("batch_consistency", "rows that depend on each other fail only batched calls"),
    ("batching_cache", "padded batch metadata fails only BatchingKvCache checks"),
    ("inputs_unchanged", "changed inputs break the caller, not other checks"),
    ("rejection", "a missing or wrong rejection explains no other failure"),
)
PRECEDENCE_RANK: dict[str, int] = {invariant: rank for rank, (invariant, _) in enumerate(CAUSE_PRECEDENCE)}
WHY: dict[str, str] = dict(CAUSE_PRECEDENCE)

if set(PRECEDENCE_RANK) != set(INVARIANTS):
    raise ImportError(
        "CAUSE_PRECEDENCE must rank every invariant of invariants/catalog.py exactly once: "
        f"missing {sorted(set(INVARIANTS) - set(PRECEDENCE_RANK))}, unknown {sorted(set(PRECEDENCE_RANK) - set(INVARIANTS))}"
    )


def in_cause_order(invariant_ids: list[str]) -> list[str]:
    """The ids, likely cause first (CAUSE_PRECEDENCE); ids it does not rank keep their order, last."""
    return sorted(invariant_ids, key=lambda i: PRECEDENCE_RANK.get(i, len(PRECEDENCE_RANK)))


def first_failure(failures: list[dict[str, Any]]) -> dict[str, Any]:
    """The failure shown first: failed checks before errored ones, then by node id."""
    return min(failures, key=lambda f: (f["outcome"] != "fail", f["nodeid"]))
