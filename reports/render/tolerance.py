"""tolerance.md: the sweep's thresholds, its worst cells, and every cell by dtype."""

from __future__ import annotations

from typing import Any

from pagecheck.reports.render.markdown import header_lines, inline_code, sci, table, verdict
from pagecheck.bench.tolerance_sweep import ORACLES, worst_for

SHOWN_WORST = 5
ORACLE_NAMES = {"vs_reference": "float64 reference", "vs_mlx_oracle": "mlx.core oracle"}


def row_allowance(row: dict[str, Any]) -> float:
    """How close a row came to failing; a row that raised or failed ranks above every pass, a declined one
    below every measured one."""
    if row.get("declined"):
        return float("-inf")
    if row["error"] is not None:
        return float("inf")
    used = max(row["vs_reference"]["allowance_used"], row["vs_mlx_oracle"]["allowance_used"])
    nonfinite = row["vs_reference"]["num_nonfinite"] + row["vs_mlx_oracle"]["num_nonfinite"]
    return float("inf") if nonfinite else used


def worst_rows(document: dict[str, Any], count: int) -> list[dict[str, Any]]:
    return sorted(document["rows"], key=row_allowance, reverse=True)[:count]


def describe_cell(row: dict[str, Any]) -> str:
    contexts = ", ".join(str(n) for n in row["context_lens"])
    mask = row["mask"] or "none"
    return (
        f"{row['dtype']} D={row['head_dim']} page={row['page_size']} L={row['query_len']} "
        f"contexts=[{contexts}] mask={mask}"
    )


def worst_cell_lines(document: dict[str, Any]) -> list[str]:
    """Per oracle, the cell that used most of its allowance against that oracle, with that oracle's numbers."""
    worst = document.get("worst") or {oracle: worst_for(document["rows"], oracle) for oracle in ORACLES}
    lines = []
    for oracle in ORACLES:
        if worst[oracle] is None:
            continue
        row = document["rows"][worst[oracle]["row"]]
        distance = row[oracle]
        where = f"- Worst against the {ORACLE_NAMES[oracle]}: {describe_cell(row)}"
        if row["error"] is not None:
            lines.append(f"{where} raised {inline_code(row['error'])}.")
        elif distance["num_nonfinite"]:
            lines.append(f"{where}: {distance['num_nonfinite']} NaN/inf where the {ORACLE_NAMES[oracle]} is finite.")
        else:
            lines.append(
                f"{where}: max abs error {distance['max_abs_error']:.2e}, rel L2 {distance['rel_l2_error']:.2e}; it uses "
                f"{distance['allowance_used']:.3f} of its allowance against this oracle (atol {row['atol']:.2e}, "
                f"rtol {row['rtol']:.2e}; 1 is the limit)."
            )
    return lines


def _used(distance: dict[str, Any] | None) -> str:
    return "-" if distance is None else f"{distance['allowance_used']:.3f}"


def _row_cells(row: dict[str, Any]) -> list[str]:
    cells = [str(row["head_dim"]), str(row["page_size"]), str(row["query_len"]), ", ".join(map(str, row["context_lens"]))]
    for key in ("vs_reference", "vs_mlx_oracle"):
        distance = row[key]
        if distance is None:
            cells += ["-"] * 4
            continue
        cells += [sci(distance["max_abs_error"]), sci(distance["max_rel_error"]), sci(distance["rel_l2_error"]), _used(distance)]
    cells.append("unsupported" if row.get("declined") else verdict(row["passed"]))
    return cells


ROW_HEADERS = (
    "D", "page", "L", "contexts",
    "f64 max abs", "f64 max rel", "f64 rel L2", "f64 used",
    "mlx max abs", "mlx max rel", "mlx rel L2", "mlx used",
    "verdict",
)
ROW_ALIGN = ("right",) * 4 + ("right",) * 8 + ("left",)


def _failure_detail(row: dict[str, Any]) -> str:
    if row["error"] is not None:
        return f"- {describe_cell(row)}: raised {inline_code(row['error'])}"
    parts = []
    for key, oracle in (("vs_reference", "float64 reference"), ("vs_mlx_oracle", "mlx.core oracle")):
        distance = row[key]
        if distance["passed"]:
            continue
        shown = "; ".join(
            f"at {tuple(m['index'])} got {m['got']} want {m['want']}" for m in distance["first_mismatches"]
        )
        parts.append(
            f"vs the {oracle}: {distance['num_mismatches']} of {distance['num_elements']} elements outside "
            f"tolerance, {distance['num_nonfinite']} NaN/inf" + (f" (first: {shown})" if shown else "")
        )
    return f"- {describe_cell(row)}: " + " | ".join(parts)


def incomplete_lines(document: dict[str, Any]) -> list[str]:
    """What an interrupted sweep kept (tolerance.json's "interrupted"), above the verdict."""
    stopped = document.get("interrupted")
    if stopped is None:
        return []
    return [f"**INCOMPLETE: interrupted after {stopped['finished']} of {stopped['planned']} cells**; the rows below "
            "are the cells that finished, and the sweep does not pass.", ""]


def stage_verdict(passed: bool, failures: int, document: dict[str, Any]) -> str:
    """PASS, FAIL, or INCOMPLETE for a stage an interrupt stopped with nothing failed among what finished (its
    `passed` is false: it did not measure everything)."""
    if passed:
        return "PASS"
    return "INCOMPLETE" if document.get("interrupted") is not None and not failures else "FAIL"


def render_tolerance(document: dict[str, Any]) -> str:
    grid, totals = document["grid"], document["totals"]
    lines = [
        f"# Tolerance sweep: {inline_code(document['subject'])}",
        "",
        header_lines(document),
        "",
        *incomplete_lines(document),
        f"**Verdict: {stage_verdict(document['passed'], totals['failed'], document)}**: {totals['passed']} of "
        f"{totals['rows']} cells "
        f"within tolerance of both oracles"
        + (f"; {totals['failed']} failed ({totals['errors']} raised an exception)" if totals["failed"] else "")
        + (f"; {totals['declined']} unsupported: the subject declines their dtype, which the contract allows "
           "(float16; float32 and bfloat16 are required)" if totals.get("declined") else "")
        + ".",
        "",
        "Each cell runs the subject once on a random paged layout from `reference.layouts.random_layout`: "
        "a shuffled block table, spare pages, and NaN in every slot no request owns. The batch holds two "
        "requests with contexts C and max(L, C/3); "
        f"H_q={grid['num_q_heads']}, H_kv={grid['num_kv_heads']}; the mask is causal when L > 1. "
        "The output is compared with the float64 reference (`reference/attention.py`, columns *f64*) and "
        "with the mlx.core oracle (`reference/attention_mx.py`, columns *mlx*). A cell passes when it is "
        "within tolerance of both.",
        "",
        "## Thresholds",
        "",
        "Quoted from `reference/tolerance.py` (`TOLERANCES`), the one place they are defined, where the "
        "reasoning behind each number is written down. An element passes when "
        "|got - want| <= atol + rtol * |want| and it is finite wherever the reference is finite.",
        "",
        table(
            ("dtype", "unit roundoff", "atol", "rtol"),
            [(name, sci(t["unit_roundoff"]), sci(t["atol"]), sci(t["rtol"])) for name, t in document["tolerances"].items()],
            ("left", "right", "right", "right"),
        ),
        "",
        "*used* is the largest |got - want| / (atol + rtol * |want|) over the output: 1.000 is the edge, "
        "above it the cell fails. *max rel* divides by |want| and grows large where the exact output is "
        "close to zero; *rel L2* is ||got - want|| / ||want||.",
        "",
    ]
    if document.get("plot"):
        lines += [
            "## Error against context",
            "",
            "Each line is one dtype and path (decode: one query row; prefill: several rows under the causal mask), "
            "at each context the cell of the grid that used most of its allowance; one panel per oracle.",
            "",
            f"![allowance used against context]({document['plot']})",
            "",
        ]
    lines += ["## Worst cell per oracle", "", *worst_cell_lines(document), ""]
    failing = [row for row in document["rows"] if not row["passed"] and not row.get("declined")]
    if failing:
        lines += ["## Failing cells", "", *(_failure_detail(row) for row in failing), ""]
    lines += [
        f"## Closest to the threshold (top {min(SHOWN_WORST, len(document['rows']))})",
        "",
        table(("dtype",) + ROW_HEADERS, [[row["dtype"]] + _row_cells(row) for row in worst_rows(document, SHOWN_WORST)],
              ("left",) + ROW_ALIGN),
        "",
        "## All cells",
    ]
    for dtype in grid["dtypes"]:
        rows = [row for row in document["rows"] if row["dtype"] == dtype]
        tol = document["tolerances"][dtype]
        lines += [
            "",
            f"### {dtype} (atol {sci(tol['atol'])}, rtol {sci(tol['rtol'])})",
            "",
            table(ROW_HEADERS, [_row_cells(row) for row in rows], ROW_ALIGN),
        ]
    lines += ["", f"Sweep time: {document['elapsed_s']:.1f} s."]
    return "\n".join(lines) + "\n"
