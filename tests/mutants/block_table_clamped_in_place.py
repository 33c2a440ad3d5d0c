"""Mutant: padding entries of the caller's block table are clamped to 0 in place."""

import mlx.core as mx
import numpy as np

from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedCache, TinyKvPagedPool  # noqa: F401
from tests.mutants._overrides import Inputs, attention_with

KILLED_BY = "inputs_unchanged"


def _clamp_in_place(a: Inputs) -> Inputs:
    table = a["block_table"]
    if isinstance(table, np.ndarray):
        np.maximum(table, 0, out=table)
    else:
        table[:] = mx.maximum(table, 0)
    return a


paged_attention = attention_with(_clamp_in_place)
