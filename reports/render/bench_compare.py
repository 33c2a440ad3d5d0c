"""The comparison with an earlier benchmark run: a table for bench.md and the terminal, and bench_compare.svg."""

from __future__ import annotations

from typing import Any

from pagecheck.bench.compare import MIN_PROCESSES
from pagecheck.reports.render.bench_labels import microseconds, variant_label
from pagecheck.reports.render.markdown import inline_code, table
from pagecheck.reports.render.svg_plot import ReferenceLine, Series, line_chart

COMPARE_PLOT_FILE = "bench_compare.svg"
CHANGE_TEXT = {"slower": "**slower**", "faster": "**faster**", "within noise": "within noise", "noise unknown": "noise unknown"}
HEADERS = ("context", "variant", "before", "now", "now / before", "IQR ratio band", "change")


def _rows(comparison: dict[str, Any], *, markdown: bool) -> list[tuple[str, ...]]:
    return [
        (
            str(row["context"]), variant_label(row["variant"]), microseconds(row["previous_median_us"]),
            microseconds(row["current_median_us"]),
            f"{row['ratio']:.3f}", f"{row['ratio_low']:.3f} .. {row['ratio_high']:.3f}",
            CHANGE_TEXT[row["change"]] if markdown else row["change"],
        )
        for row in comparison["rows"]
    ]  # fmt: skip


def _rule_text() -> str:
    return (
        "A change is beyond the noise when the two runs' interquartile ranges of per-process medians do not "
        "overlap, i.e. when the IQR ratio band (q1 now / q3 before .. q3 now / q1 before) excludes 1; with fewer "
        f"than {MIN_PROCESSES} processes per point in either run the noise is unknown and nothing is flagged."
    )


def comparison_text(document: dict[str, Any]) -> str:
    """What `pagecheck bench --compare` prints: the ratios and the flagged changes."""
    from tabulate import tabulate

    comparison = document["comparison"]
    lines = [f"compared with {comparison['previous']} (now / before; above 1 is slower now):"]
    lines += [tabulate(_rows(comparison, markdown=False), headers=HEADERS, tablefmt="github")]
    lines += [f"{comparison['beyond_noise']} of {len(comparison['rows'])} points changed beyond the noise."]
    lines += [f"note: {difference}" for difference in comparison["differences"]]
    if comparison["unmatched"]:
        lines += ["not in both runs: " + ", ".join(comparison["unmatched"])]
    return "\n".join(lines)


def comparison_section(document: dict[str, Any]) -> list[str]:
    comparison = document["comparison"]
    lines = [
        f"## Compared with {inline_code(comparison['previous'])}",
        "",
        f"The earlier run was created {comparison['previous_created'] or 'at an unknown time'}. *now / before* is this "
        "run's median over the earlier one's: above 1 is slower now. " + _rule_text(),
        "",
        f"{comparison['beyond_noise']} of {len(comparison['rows'])} points changed beyond the noise.",
        "",
    ]
    if comparison["differences"]:
        lines += ["The runs differ in what they measured:", "", *(f"- {d}" for d in comparison["differences"]), ""]
    if comparison["rows"]:
        lines += [
            f"![ratio to the earlier run]({comparison['plot']})",
            "",
            table(HEADERS, _rows(comparison, markdown=True), ("right", "left", "right", "right", "right", "right", "left")),
            "",
        ]
    if comparison["unmatched"]:
        lines += ["Measured in only one of the runs: " + ", ".join(comparison["unmatched"]) + ".", ""]
    return lines


def render_comparison_plot(document: dict[str, Any]) -> str:
    comparison = document["comparison"]
    series = []
    for variant in document["configuration"]["variants"]:
        rows = [row for row in comparison["rows"] if row["variant"] == variant]
        if not rows:
            continue
        series.append(
            Series(
                variant_label(variant, document),
                [(float(row["context"]), row["ratio"]) for row in rows],
                band=tuple((float(row["context"]), row["ratio_low"], row["ratio_high"]) for row in rows),
                dashed=variant != "subject",
            )
        )
    if not series:
        raise ValueError("the comparison has no point measured in both runs")
    return line_chart(
        series,
        title="Latency now / latency in the earlier run",
        subtitle=f"against {comparison['previous']}; band: IQR ratio, beyond the noise where it excludes 1",
        x_label="context (tokens)",
        y_label="median now / median before",
        reference_lines=(ReferenceLine(1.0, "no change"),),
        y_format=lambda v: f"{v:g}x",
    )

