"""Mutant: each row's live block-table entries are walked last page first."""

import numpy as np

from pagecheck.reference.arrays import to_numpy
from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedCache, TinyKvPagedPool  # noqa: F401
from tests.mutants._overrides import Inputs, attention_with

KILLED_BY = "block_table_order"


def _reverse_live_pages(a: Inputs) -> Inputs:
    table = to_numpy(a["block_table"]).copy()
    for row, n in enumerate(to_numpy(a["context_lens"])):
        live = -(-int(n) // a["page_size"])
        table[row, :live] = table[row, :live][::-1].copy()
    return {**a, "block_table": table}


paged_attention = attention_with(_reverse_live_pages)
