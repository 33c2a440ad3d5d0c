"""The tolerance sweep: a subject's paged attention against both oracles over a grid of shapes.

Each cell of the grid (dtype x head dim x page size x query length x
context) builds one layout with reference.layouts.random_layout (shuffled
block tables, NaN in every slot no request owns), runs the subject once,
and measures its distance from the float64 reference and from the
mlx.core oracle with reference.tolerance.compare. A cell passes when it is
within the dtype's tolerance of both. Thresholds come from
reference.tolerance.TOLERANCES and nowhere else.
"""

from __future__ import annotations

import itertools
import time
import traceback
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterator

import mlx.core as mx
import numpy as np

from pagecheck.bench.partial import PartialRun
from pagecheck.invariants.calls import call_attention
from pagecheck.invariants.check_timeout import time_limit
from pagecheck.invariants.dtype_support import DECLINE_ERRORS, REQUIRED_DTYPES, names_dtype
from pagecheck.invariants.subject import is_user_interrupt, raise_if_interrupted
from pagecheck.reference import attention_mx
from pagecheck.reference.arrays import to_numpy
from pagecheck.reference.layouts import DTYPES, PagedLayout, random_layout
from pagecheck.reference.tolerance import TOLERANCES, Comparison, compare

PagedAttention = Callable[..., Any]
# The row keys of the two comparisons: the float64 NumPy reference and the readable mlx.core oracle.
ORACLES = ("vs_reference", "vs_mlx_oracle")
Progress = Callable[[int, int, "SweepCell"], None]


@dataclass(frozen=True)
class SweepGrid:
    """The axes of the sweep and the fixed part of every layout."""

    dtypes: tuple[str, ...]
    head_dims: tuple[int, ...]
    page_sizes: tuple[int, ...]
    query_lens: tuple[int, ...]
    contexts: tuple[int, ...]
    # Qwen3's 4:1 GQA ratio, kept small so the float64 reference stays quick.
    num_q_heads: int = 8
    num_kv_heads: int = 2
    spare_pages: int = 3

    def __post_init__(self) -> None:
        for dtype in self.dtypes:
            if dtype not in DTYPES:
                raise ValueError(f"dtypes contains {dtype!r}, not one of {DTYPES}")
        for field_name in ("head_dims", "page_sizes", "query_lens", "contexts"):
            values = getattr(self, field_name)
            if not values or any(not isinstance(v, int) or v <= 0 for v in values):
                raise ValueError(f"{field_name}={values!r} must be a non-empty tuple of positive ints")

    def cells(self) -> Iterator["SweepCell"]:
        """Every valid combination; a context shorter than the query length is not a valid layout."""
        for dtype, head_dim, page_size, query_len, context in itertools.product(
            self.dtypes, self.head_dims, self.page_sizes, self.query_lens, self.contexts
        ):
            if context >= query_len:
                yield SweepCell(dtype, head_dim, page_size, query_len, context)


FULL_GRID = SweepGrid(
    dtypes=("float32", "bfloat16", "float16"),
    head_dims=(64, 128),
    page_sizes=(16, 128),
    query_lens=(1, 7, 16),
    contexts=(1, 100, 1000, 4096),
)

QUICK_GRID = SweepGrid(
    dtypes=("float32", "bfloat16", "float16"),
    head_dims=(128,),
    page_sizes=(16,),
    query_lens=(1, 7),
    contexts=(100, 1000),
)


@dataclass(frozen=True)
class SweepCell:
    dtype: str
    head_dim: int
    page_size: int
    query_len: int
    context: int

    @property
    def context_lens(self) -> list[int]:
        """A ragged batch of two: the cell's context and a shorter one, never below the query length."""
        return [self.context, max(self.query_len, self.context // 3)]

    @property
    def mask(self) -> str | None:
        # One query row is the decode step: causal and unmasked are the same there.
        return "causal" if self.query_len > 1 else None

    @property
    def path(self) -> str:
        """decode (one query row, a generation step) or prefill (several rows under the causal mask)."""
        return "decode" if self.query_len == 1 else "prefill"

    @property
    def label(self) -> str:
        return f"{self.dtype} D={self.head_dim} page={self.page_size} L={self.query_len} C={self.context}"


def allowance_used(got: np.ndarray, want: np.ndarray, dtype: str) -> float:
    """Largest |got - want| / (atol + rtol * |want|) over finite elements: above 1 fails.

    compare() gives the verdict; this says how close to the edge a passing
    output is, which is what ranks the "worst" rows of the sweep.
    """
    tol = TOLERANCES[dtype]
    finite = np.isfinite(got) & np.isfinite(want)
    if not finite.any():
        return 0.0
    ratio = np.abs(got[finite] - want[finite]) / (tol.atol + tol.rtol * np.abs(want[finite]))
    return float(ratio.max())


def _distance(comparison: Comparison, used: float) -> dict[str, Any]:
    return {
        "allowance_used": used,
        "max_abs_error": comparison.max_abs_error,
        "max_rel_error": comparison.max_rel_error,
        "rel_l2_error": comparison.rel_l2_error,
        "num_mismatches": comparison.num_mismatches,
        "num_nonfinite": comparison.num_nonfinite,
        "num_elements": comparison.num_elements,
        "passed": comparison.passed,
        "first_mismatches": [
            {"index": list(m["index"]), "got": _json_float(m["got"]), "want": _json_float(m["want"])}
            for m in comparison.first_mismatches
        ],
    }


def _json_float(x: float) -> float | str:
    """JSON has no NaN or infinity; those are spelled out as strings."""
    return x if np.isfinite(x) else str(x)


def _layout_for(cell: SweepCell, grid: SweepGrid, seed: int, cell_index: int) -> PagedLayout:
    # Seeding by (seed, cell index) makes every row reproducible on its own.
    rng = np.random.default_rng([seed, cell_index])
    return random_layout(
        rng,
        context_lens=cell.context_lens,
        page_size=cell.page_size,
        num_queries=cell.query_len,
        num_q_heads=grid.num_q_heads,
        num_kv_heads=grid.num_kv_heads,
        head_dim=cell.head_dim,
        dtype=cell.dtype,
        mask=cell.mask,
        spare_pages=grid.spare_pages,
    )


def measure_cell(
    paged_attention: PagedAttention, cell: SweepCell, grid: SweepGrid, seed: int, cell_index: int,
    call_timeout_s: float = 0.0,
) -> dict[str, Any]:
    """One row of the sweep: the cell, both distances, the threshold, the verdict. The subject's call fails the
    cell once it runs past `call_timeout_s` (0: no limit; check_timeout.time_limit, as --check-timeout)."""
    tolerance = TOLERANCES[cell.dtype]
    row: dict[str, Any] = {
        **asdict(cell),
        "context_lens": cell.context_lens,
        "mask": cell.mask,
        "path": cell.path,
        "atol": tolerance.atol,
        "rtol": tolerance.rtol,
    }
    layout = _layout_for(cell, grid, seed, cell_index)
    inputs = layout.as_mx()
    # The oracle runs on the CPU stream whatever the subject's device: on CUDA,
    # MLX may run float32 matmuls in TF32, which would make it no oracle.
    with mx.stream(mx.cpu):
        oracle = to_numpy(attention_mx.paged_attention(**inputs), np.float64)
    want = layout.reference_output()
    try:
        with time_limit(call_timeout_s, "--check-timeout"):
            got = to_numpy(call_attention(paged_attention, inputs), np.float64)
        raise_if_interrupted()  # one the subject's own `except:` swallowed
        vs_reference = compare(got, want, cell.dtype)
        vs_oracle = compare(got, oracle, cell.dtype)
    # The subject's failure is the row's finding, not the sweep's: its sys.exit, its own KeyboardInterrupt or
    # another BaseException too.
    except BaseException as exc:
        if is_user_interrupt(exc):
            raise
        raise_if_interrupted()
        row.update(
            vs_reference=None,
            vs_mlx_oracle=None,
            passed=False,
            declined=is_declined(exc, cell.dtype),
            error=f"{type(exc).__name__}: {exc}",
            traceback=traceback.format_exc(limit=-3),
        )
        return row
    row.update(
        vs_reference=_distance(vs_reference, allowance_used(got, want, cell.dtype)),
        vs_mlx_oracle=_distance(vs_oracle, allowance_used(got, oracle, cell.dtype)),
        passed=vs_reference.passed and vs_oracle.passed,
        declined=False,
        error=None,
        traceback=None,
    )
    return row


def is_declined(exc: BaseException, dtype: str) -> bool:
    """Whether raising `exc` on a cell of `dtype` is the subject declining an optional dtype, as the invariants
    suite allows (invariants/dtype_support.py): the cell is then unsupported, neither passed nor failed."""
    return dtype not in REQUIRED_DTYPES and isinstance(exc, DECLINE_ERRORS) and names_dtype(str(exc), dtype)


def oracle_allowance(row: dict[str, Any], oracle: str) -> float:
    """How much of its allowance a row used against one oracle; a row that raised or gave NaN/inf ranks first."""
    distance = row[oracle]
    if distance is None or distance["num_nonfinite"]:
        return float("inf")
    return distance["allowance_used"]


def worst_for(rows: list[dict[str, Any]], oracle: str) -> dict[str, Any] | None:
    """The row closest to failing (or failing worst) against one oracle, by its own allowance used."""
    if not rows:
        return None
    measured = [i for i in range(len(rows)) if not rows[i].get("declined")]
    if not measured:
        return None
    index = max(measured, key=lambda i: oracle_allowance(rows[i], oracle))
    used = oracle_allowance(rows[index], oracle)
    return {"row": index, "allowance_used": used if used != float("inf") else None}


def run_sweep(
    paged_attention: PagedAttention,
    grid: SweepGrid,
    *,
    seed: int = 0,
    progress: Progress | None = None,
    call_timeout_s: float = 0.0,
    checkpoint: Callable[[PartialRun], None] | None = None,
    begin_cell: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Measure every cell; returns the body of tolerance.json (without the document header). An interrupt raises
    PartialRun with the body over the cells that finished; `checkpoint` gets that PartialRun after each cell but
    the last, so that a process ended outright (a call stuck past the time limit's grace) keeps them too.
    `begin_cell(name)` is called before each cell (Subject.begin_check: a sandboxed worker that a cell stopped
    starts afresh for the next)."""
    cells = list(grid.cells())
    rows: list[dict[str, Any]] = []
    start = time.perf_counter()
    try:
        for index, cell in enumerate(cells):
            if begin_cell is not None:
                begin_cell(f"tolerance cell {index}: {cell.label}")
            rows.append(measure_cell(paged_attention, cell, grid, seed, index, call_timeout_s))
            if checkpoint is not None and len(rows) < len(cells):
                checkpoint(PartialRun(sweep_body(grid, rows, start), len(rows), len(cells), "cells"))
            if progress is not None:
                progress(index + 1, len(cells), cell)
    except KeyboardInterrupt:
        raise PartialRun(sweep_body(grid, rows, start), len(rows), len(cells), "cells") from None
    return sweep_body(grid, rows, start)


def sweep_body(grid: SweepGrid, rows: list[dict[str, Any]], start: float) -> dict[str, Any]:
    """tolerance.json's body over the measured `rows` (run_sweep's result; a sweep started at `start`)."""
    declined = sum(1 for row in rows if row["declined"])
    failed = sum(1 for row in rows if not row["passed"]) - declined
    return {
        "worst": {oracle: worst_for(rows, oracle) for oracle in ORACLES},
        "grid": {
            "dtypes": list(grid.dtypes),
            "head_dims": list(grid.head_dims),
            "page_sizes": list(grid.page_sizes),
            "query_lens": list(grid.query_lens),
            "contexts": list(grid.contexts),
            "num_q_heads": grid.num_q_heads,
            "num_kv_heads": grid.num_kv_heads,
            "spare_pages": grid.spare_pages,
        },
        "tolerances": {
            name: {"atol": tol.atol, "rtol": tol.rtol, "unit_roundoff": tol.unit_roundoff}
            for name, tol in TOLERANCES.items()
        },
        "rows": rows,
        "totals": {
            "rows": len(rows),
            "passed": sum(1 for row in rows if row["passed"]),
            "failed": failed,
            "errors": sum(1 for row in rows if row["error"] is not None and not row["declined"]),
            "declined": declined,
        },
        "passed": failed == 0,
        "elapsed_s": time.perf_counter() - start,
    }
