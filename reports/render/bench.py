"""bench.md and bench.svg: latency against context for the three decode-attention variants."""

from __future__ import annotations

from typing import Any

from pagecheck.reports.render.markdown import header_lines, inline_code, sci, table
from pagecheck.reports.render.svg_plot import Series, line_chart

VARIANT_LABELS = {
    "dense_gather": "dense + gather (gather timed)",
    "paged": "direct paged",
    "mlx_sdpa": "MLX SDPA on pre-gathered K/V",
}
PLOT_FILE = "bench.svg"


def _label(variant: str) -> str:
    return VARIANT_LABELS.get(variant, variant)


def microseconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 1000:
        return f"{value / 1000:.2f} ms"
    return f"{value:.0f} µs" if value >= 10 else f"{value:.1f} µs"


def tick_label(value: float) -> str:
    """Axis labels: round numbers without trailing zeros."""
    return f"{value / 1000:g} ms" if value >= 1000 else f"{value:g} µs"


def times(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}x"


def shape_line(config: dict[str, Any]) -> str:
    return (
        f"B={config['batch']}, H_q={config['num_q_heads']}, H_kv={config['num_kv_heads']}, "
        f"L={config['num_queries']}, D={config['head_dim']}, {config['dtype']}, page size {config['page_size']}"
    )


def render_plot(document: dict[str, Any]) -> str:
    config = document["configuration"]
    series = [
        Series(
            _label(variant),
            [(float(context), median) for context, median in document["medians_us"][variant].items() if median is not None],
        )
        for variant in config["variants"]
    ]
    return line_chart(
        series,
        title="Decode attention latency against context",
        subtitle=f"{shape_line(config)}; {config['device']}; median per call",
        x_label="context (tokens)",
        y_label="median latency per call",
        y_format=tick_label,
    )


def median_rows(document: dict[str, Any]) -> list[list[str]]:
    config, medians = document["configuration"], document["medians_us"]
    rows = []
    for context in (str(c) for c in config["contexts"]):
        speed = document["speedups"][context]
        rows.append(
            [context]
            + [microseconds(medians[v][context]) for v in config["variants"]]
            + [times(speed["paged_vs_dense_gather"]), times(speed["paged_vs_mlx_sdpa"])]
        )
    return rows


def median_headers(document: dict[str, Any]) -> tuple[str, ...]:
    variants = document["configuration"]["variants"]
    return ("context", *(_label(v) for v in variants), "paged speedup vs dense + gather", "vs MLX SDPA")


def render_bench(document: dict[str, Any]) -> str:
    config, build = document["configuration"], document["build"]
    variants = config["variants"]
    lines = [
        "# Operator benchmark",
        "",
        header_lines(document),
        "",
        f"**Correctness: {'PASS' if document['correct'] else 'FAIL'}**: every variant's output is "
        f"{'within' if document['correct'] else 'NOT within'} atol = {sci(document['atol'])} of the float64 "
        "reference at every context.",
        "",
        "Decode attention in the Qwen3-4B shape (" + shape_line(config) + "), three ways: "
        "**direct paged** (`ext.paged_attention` walks the block table), **dense + gather** (the pages are "
        "gathered into dense K/V, then `ext.dense_attention`; the gather is timed), and **MLX SDPA** "
        "(`mx.fast.scaled_dot_product_attention` on K/V gathered beforehand; the gather is not timed). "
        f"Each variant and context ran in {config['repeats']} fresh process{'es' if config['repeats'] > 1 else ''}, "
        f"{config['warmup']} warm-up then "
        f"{config['iterations']} timed calls each; a figure is the median over processes of each process's median.",
    ]
    if document["subject"] != "impl":
        lines += ["", f"The benchmark measures this project's extension, not the subject {inline_code(document['subject'])}."]
    lines += [
        "",
        f"![latency against context]({PLOT_FILE})",
        "",
        "## Median latency per call",
        "",
        table(median_headers(document), median_rows(document), ("right",) * (len(variants) + 3)),
        "",
        "## Spread over calls",
        "",
        table(
            ("context", "variant", "median", "fastest call", "slowest call"),
            [
                (context, _label(v), microseconds(document["medians_us"][v][context]),
                 microseconds(document["min_us"][v][context]), microseconds(document["max_us"][v][context]))
                for context in (str(c) for c in config["contexts"]) for v in variants
            ],
            ("right", "left", "right", "right", "right"),
        ),
        "",
        "## Correctness on the benchmark's inputs",
        "",
        "Max abs error against the float64 reference (`reference/attention.py`):",
        "",
        table(
            ("context", *(_label(v) for v in variants)),
            [
                (context, *(e if isinstance(e, str) else sci(e) for e in (errors.get(v) for v in variants)))
                for context, errors in document["correctness"]["max_abs_error_vs_float64"].items()
            ],
            ("right",) * (len(variants) + 1),
        ),
        "",
    ]  # fmt: skip
    if document["problems"]:
        lines += ["Problems:", "", *(f"- {problem}" for problem in document["problems"]), ""]
    host = document["host"]
    lines += [
        "## Machine and build",
        "",
        f"- Host: {host['cpu']} ({host['cpu_count']} cores), {host['platform']}, Python {host['python']}, MLX {host['mlx']}",
        "- Extension: " + ", ".join(f"{key} = {inline_code(str(value))}" for key, value in build.items()),
        "",
    ]
    return "\n".join(lines)
