"""inputs_unchanged: paged_attention leaves every array it is given exactly as it was.

MLX arrays can be changed in place (`x[...] = y`, `x *= 2` rebinds the
caller's array), so a kernel wrapper that clamps padding or scales the query
in place would corrupt the caller's pages, table or query.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pagecheck.invariants.calls import call_attention
from pagecheck.invariants.dtype_support import require_dtype
from pagecheck.invariants.profiles import shared_examples
from pagecheck.invariants.strategies import paged_layouts
from pagecheck.invariants.verdict import expect, same_array
from pagecheck.reference.arrays import to_numpy
from pagecheck.reference.layouts import DTYPES

INVARIANT = "inputs_unchanged"
pytestmark = pytest.mark.invariant(INVARIANT)

ARRAYS = ("query", "key_pages", "value_pages", "block_table", "context_lens")


@pytest.mark.beyond_course
@pytest.mark.parametrize("dtype", DTYPES)
@shared_examples(len(DTYPES))
@given(data=st.data())
def test_inputs_are_unchanged_by_the_call(paged_attention: object, dtype: str, data: st.DataObject) -> None:
    require_dtype(paged_attention, dtype, INVARIANT)
    layout = data.draw(paged_layouts(dtypes=(dtype,), num_queries=(1, 9), masks=(None, "causal"), allow_empty_rows=True))
    inputs = layout.as_mx()
    before = {name: to_numpy(inputs[name]).copy() for name in ARRAYS}
    call_attention(paged_attention, inputs)
    for name in ARRAYS:
        expect(same_array(inputs[name], before[name]), INVARIANT, f"the call changed its input {name}", layout)
