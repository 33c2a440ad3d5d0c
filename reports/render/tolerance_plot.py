"""tolerance.svg: error as a fraction of the allowance against context, per dtype and path, for both oracles.

One panel per oracle, one line per (dtype, path): at each context the
largest allowance used over the grid's other axes (head dim, page size,
query lengths of the path). 1 is the edge of the tolerance table. The y axis
is logarithmic, so a value of 0 (an exact output) is drawn at
ALLOWANCE_FLOOR, and a cell that raised or returned NaN/inf at ALLOWANCE_CAP.
"""

from __future__ import annotations

from typing import Any

from pagecheck.reports.render.svg_plot import ReferenceLine, Series, line_chart, stack_panels
from pagecheck.bench.tolerance_sweep import ORACLES, oracle_allowance

PLOT_FILE = "tolerance.svg"
ORACLE_TITLES = {"vs_reference": "against the float64 reference", "vs_mlx_oracle": "against the mlx.core oracle"}
PATHS = ("decode", "prefill")
ALLOWANCE_FLOOR = 1e-3
ALLOWANCE_CAP = 1e3


def drawn_value(used: float) -> float:
    """The allowance used as plotted: clamped to [ALLOWANCE_FLOOR, ALLOWANCE_CAP] (inf: raised or NaN)."""
    return min(max(used, ALLOWANCE_FLOOR), ALLOWANCE_CAP)


def oracle_series(document: dict[str, Any], oracle: str) -> list[Series]:
    """One series per (dtype, path) with rows: the worst allowance used at each context; a colour per
    dtype, prefill dashed."""
    series = []
    for dtype_idx, dtype in enumerate(document["grid"]["dtypes"]):
        for path in PATHS:
            worst: dict[int, float] = {}
            for row in document["rows"]:
                if row["dtype"] == dtype and row["path"] == path and not row.get("declined"):
                    worst[row["context"]] = max(worst.get(row["context"], 0.0), oracle_allowance(row, oracle))
            if worst:
                points = [(float(context), drawn_value(used)) for context, used in sorted(worst.items())]
                series.append(Series(f"{dtype} {path}", points, dashed=path == "prefill", colour=dtype_idx))
    return series


def render_tolerance_plot(document: dict[str, Any]) -> str:
    panels = [
        line_chart(
            oracle_series(document, oracle),
            title=f"Error as a fraction of the allowance, {ORACLE_TITLES[oracle]}",
            subtitle=f"worst cell per context; below {ALLOWANCE_FLOOR:g} drawn at {ALLOWANCE_FLOOR:g}, "
            f"raised or NaN/inf at {ALLOWANCE_CAP:g}",
            x_label="context (tokens, longest request of the batch)",
            y_label="max |got - want| / (atol + rtol |want|)",
            reference_lines=(ReferenceLine(1.0, "tolerance edge"),),
        )
        for oracle in ORACLES
    ]
    return stack_panels(panels)
