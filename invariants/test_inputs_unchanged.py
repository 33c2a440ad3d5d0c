"""inputs_unchanged: paged_attention leaves every array it is given exactly as it was.

MLX arrays can be changed in place (`x[...] = y`, `x *= 2` rebinds the
caller's array), so a kernel wrapper that clamps padding or scales the query
in place would corrupt the caller's pages, table or query.
"""

from __future__ import annotations

import pytest
from hypothesis import given

from pagecheck.invariants.strategies import paged_layouts
from pagecheck.invariants.verdict import expect, same_array
from pagecheck.reference.arrays import to_numpy
from pagecheck.reference.layouts import DTYPES, PagedLayout

INVARIANT = "inputs_unchanged"
pytestmark = pytest.mark.invariant(INVARIANT)

ARRAYS = ("query", "key_pages", "value_pages", "block_table", "context_lens")


@given(layout=paged_layouts(dtypes=DTYPES, num_queries=(1, 9), masks=(None, "causal"), allow_empty_rows=True))
def test_inputs_are_unchanged_by_the_call(paged_attention: object, layout: PagedLayout) -> None:
    inputs = layout.as_mx()
    before = {name: to_numpy(inputs[name]).copy() for name in ARRAYS}
    paged_attention(**inputs)
    for name in ARRAYS:
        expect(same_array(inputs[name], before[name]), INVARIANT, f"the call changed its input {name}", layout)
