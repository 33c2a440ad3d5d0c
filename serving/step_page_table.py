"""The block table and context lengths of one scheduler step, built once and shared by every layer.

Every layer's pool sees the same allocations in the same order, so every layer
arrives at the same page ids; the first layer to ask builds the int32 arrays
and the others get the same objects. A layer whose rows differ (which would
mean the pools diverged) gets its own arrays, and `builds` counts it, so a
test can hold the scheduler to one build per phase of a step.
"""

from __future__ import annotations

import mlx.core as mx

TableKey = tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]


class StepPageTable:
    def __init__(self) -> None:
        self._tables: dict[TableKey, tuple[mx.array, mx.array]] = {}
        self.builds = 0

    def start_step(self) -> None:
        """Forget the previous step's tables."""
        self._tables = {}

    def arrays(self, rows: list[list[int]], context_lens: list[int]) -> tuple[mx.array, mx.array]:
        """(block_table int32 [B, widest row] padded with -1, context_lens int32 [B])."""
        key = (tuple(tuple(row) for row in rows), tuple(context_lens))
        tables = self._tables.get(key)
        if tables is None:
            width = max((len(row) for row in rows), default=0)
            block_table = mx.array([row + [-1] * (width - len(row)) for row in rows], dtype=mx.int32)
            tables = (block_table, mx.array(context_lens, dtype=mx.int32))
            self._tables[key] = tables
            self.builds += 1
        return tables
