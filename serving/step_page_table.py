"""The block table and context lengths of one scheduler step, built once and shared by every layer.

Every layer's pool sees the same allocations in the same order, so every layer
arrives at the same page ids; the first layer to ask builds the int32 arrays
and the others get the same objects. A layer whose rows differ (which would
mean the pools diverged) gets its own arrays, and `builds` counts it, so a
test can hold the scheduler to one build per phase of a step.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx

class StepPageTable:
    def __init__(self) -> None:
        # (rows, context_lens, width step, (block_table, context_lens arrays)) of each distinct table built
        # this step.
        self._tables: list[tuple[list[tuple[int, ...]], list[int], int, tuple[mx.array, mx.array]]] = []
        self.builds = 0
        # One tuple object per distinct page-id row made this step (shared_row).
        self._rows: dict[tuple[int, ...], tuple[int, ...]] = {}

    def start_step(self) -> None:
        """Forget the previous step's tables and shared rows."""
        self._tables = []
        self._rows = {}

    def shared_row(self, row: tuple[int, ...]) -> tuple[int, ...]:
        """The step's one tuple equal to `row`: the layers of a request make equal page-id tuples, and
        rows that are one object compare in O(1) in `arrays`."""
        return self._rows.setdefault(row, row)

    def arrays(
        self, rows: Sequence[Sequence[int]], context_lens: list[int], width_step: int = 1
    ) -> tuple[mx.array, mx.array]:
        """(block_table int32 [B, width] padded with -1, context_lens int32 [B]), where width is the widest
        row rounded up to a multiple of `width_step` (a compiled step keeps one trace per width).

        Rows given as tuples (TinyKvPagedCache.page_id_tuple) are compared and kept without a copy; rows
        from shared_row compare by identity."""
        rows = [row if isinstance(row, tuple) else tuple(row) for row in rows]
        # Whole-list comparison runs in C; a step holds one table per phase, so the scan is short.
        for seen_rows, seen_lens, seen_step, tables in self._tables:
            if seen_step == width_step and seen_lens == context_lens and seen_rows == rows:
                return tables
        widest = max((len(row) for row in rows), default=0)
        width = -(-widest // width_step) * width_step
        block_table = mx.array([list(row) + [-1] * (width - len(row)) for row in rows], dtype=mx.int32)
        tables = (block_table, mx.array(context_lens, dtype=mx.int32))
        self._tables.append((rows, list(context_lens), width_step, tables))
        self.builds += 1
        return tables
