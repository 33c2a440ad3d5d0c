"""bench.md and bench.svg: the subject's decode latency against context, beside the other variants."""

from __future__ import annotations

from typing import Any

from pagecheck.reports.render.bench_compare import comparison_section
from pagecheck.reports.render.bench_labels import microseconds, variant_label
from pagecheck.reports.render.markdown import header_lines, inline_code, table
from pagecheck.reports.render.svg_plot import Series, line_chart

PLOT_FILE = "bench.svg"
SHORT_LABELS = {"impl": "impl", "dense_gather": "dense + gather", "mlx_sdpa": "MLX SDPA"}


def tick_label(value: float) -> str:
    """Axis labels: round numbers without trailing zeros."""
    return f"{value / 1000:g} ms" if value >= 1000 else f"{value:g} µs"


def times(value: float | None) -> str:
    """A speedup: one decimal from 1x up, two significant digits below (a subject 100x slower reads 0.01x)."""
    if value is None:
        return "-"
    return f"{value:.1f}x" if value >= 1 else f"{value:.2g}x"


def shape_line(config: dict[str, Any]) -> str:
    return (
        f"B={config['batch']}, H_q={config['num_q_heads']}, H_kv={config['num_kv_heads']}, "
        f"L={config['num_queries']}, D={config['head_dim']}, {config['dtype']}, page size {config['page_size']}"
    )


def check_at(document: dict[str, Any], variant: str, context: str) -> dict[str, Any] | None:
    return document["correctness"].get(variant, {}).get(context)


def mark(check: dict[str, Any] | None) -> str:
    """The correctness mark beside a time: ok, **WRONG**, or - when no output was checked."""
    if check is None:
        return "-"
    return "ok" if check["passed"] else "**WRONG**"


def variant_correct(document: dict[str, Any], variant: str) -> bool:
    checks = [check_at(document, variant, str(c)) for c in document["configuration"]["contexts"]]
    return all(check is not None and check["passed"] for check in checks)


def measured_outputs_correct(document: dict[str, Any]) -> bool:
    """Whether every output that was checked is within tolerance (of an interrupted run: those that finished)."""
    return bool(document["subject_correct"]) and all(
        check is None or check["passed"] for by_context in document["correctness"].values()
        for check in by_context.values())


def render_plot(document: dict[str, Any]) -> str:
    config = document["configuration"]
    series = []
    for variant in config["variants"]:
        spreads = [(float(context), spread) for context, spread in document["spread_us"][variant].items() if spread]
        name = variant_label(variant, document) + ("" if variant_correct(document, variant) else " (WRONG output)")
        series.append(
            Series(
                name,
                [(context, spread["median"]) for context, spread in spreads],
                band=tuple((context, spread["q1"], spread["q3"]) for context, spread in spreads),
                whiskers=tuple((context, spread["min"], spread["max"]) for context, spread in spreads),
                dashed=variant != "subject",
            )
        )
    return line_chart(
        series,
        title="Decode attention latency against context",
        subtitle=f"{shape_line(config)}; {config['device']}; line: median, band: IQR, whiskers: range "
        f"over {config['repeats']} processes",
        x_label="context (tokens)",
        y_label="latency per call",
        y_format=tick_label,
    )


def median_rows(document: dict[str, Any]) -> list[list[str]]:
    """Per context: each variant's median with its correctness mark, then the subject's speedups."""
    config, medians = document["configuration"], document["medians_us"]
    others = [v for v in config["variants"] if v != "subject"]
    rows = []
    for context in (str(c) for c in config["contexts"]):
        speed = document["speedups"][context]
        rows.append(
            [context]
            + [f"{microseconds(medians[v][context])}, {mark(check_at(document, v, context))}" for v in config["variants"]]
            + [times(speed[f"vs_{v}"]) for v in others]
        )
    return rows


def median_headers(document: dict[str, Any]) -> tuple[str, ...]:
    variants = document["configuration"]["variants"]
    others = [v for v in variants if v != "subject"]
    return ("context", *(variant_label(v) for v in variants), *(f"subject speedup vs {SHORT_LABELS[v]}" for v in others))


def _spread_rows(document: dict[str, Any]) -> list[tuple[str, ...]]:
    config = document["configuration"]
    rows = []
    for context in (str(c) for c in config["contexts"]):
        for variant in config["variants"]:
            spread = document["spread_us"][variant][context]
            check = check_at(document, variant, context)
            used = "-" if check is None or check["error"] is not None else f"{check['allowance_used']:.3f}"
            if spread is None:
                rows.append((context, variant_label(variant, document), "-", "-", "-", "-", "-", mark(check), used))
                continue
            rows.append((
                context, variant_label(variant, document), microseconds(spread["median"]),
                f"{microseconds(spread['q1'])} .. {microseconds(spread['q3'])}",
                f"{microseconds(spread['min'])} .. {microseconds(spread['max'])}",
                microseconds(document["min_us"][variant][context]), microseconds(document["max_us"][variant][context]),
                mark(check), used,
            ))  # fmt: skip
    return rows


def _verdict_lines(document: dict[str, Any]) -> list[str]:
    tolerance = document["tolerance"]
    threshold = f"atol = rtol = {tolerance['atol']:.2e}" if tolerance["atol"] == tolerance["rtol"] else (
        f"atol {tolerance['atol']:.2e}, rtol {tolerance['rtol']:.2e}")  # fmt: skip
    subject = inline_code(document["subject"])
    if document["subject_correct"]:
        subject_line = f"the subject {subject}'s output is within tolerance of the float64 reference at every context"
    else:
        subject_line = (
            f"the subject {subject}'s output is NOT within tolerance of the float64 reference: its times are "
            "those of a wrong implementation"
        )
    stopped = document.get("interrupted")
    incomplete = [] if stopped is None else [
        f"**INCOMPLETE: interrupted after {stopped['finished']} of {stopped['planned']} contexts**; the tables "
        "below are the contexts that finished, and the run does not pass.", ""]
    # Interrupted with every output measured correct: incomplete, not failed (`correct` is false: not all ran).
    incomplete_only = stopped is not None and measured_outputs_correct(document)
    correctness = "PASS" if document["correct"] else "INCOMPLETE" if incomplete_only else "FAIL"
    return [
        *incomplete,
        f"**Correctness: {correctness}**: {subject_line} "
        f"(`reference/tolerance.py`, {document['configuration']['dtype']}: {threshold}).",
    ]


def render_bench(document: dict[str, Any]) -> str:
    config, build = document["configuration"], document["build"]
    variants = config["variants"]
    plural = "es" if config["repeats"] > 1 else ""
    lines = [
        "# Operator benchmark",
        "",
        header_lines(document),
        "",
        *_verdict_lines(document),
        "",
        f"Decode attention in the Qwen3-4B shape ({shape_line(config)}) on the same paged layouts, "
        f"{len(variants)} ways: the **subject**'s `paged_attention` ({inline_code(document['subject'])}), called "
        "as the course calls it (the six arrays and the page size in order, the mask by keyword)"
        + (", **impl** (this project's `impl.paged_attention`, called the same way: the reference row)"
           if "impl" in variants else " (the subject is this project's implementation)")
        + ", **dense + gather** (the pages are gathered into dense K/V, then `ext.dense_attention`; the gather "
        "is timed) and **MLX SDPA** (`mx.fast.scaled_dot_product_attention` on K/V gathered beforehand; the "
        f"gather is not timed). Each variant and context ran in {config['repeats']} fresh process{plural}, "
        f"{config['warmup']} warm-up then {config['iterations']} timed calls each. A figure is the median over "
        "processes of each process's median; the spread is the interquartile range (IQR) and the range of those "
        "per-process medians. One output of each variant at each context is compared with the float64 "
        "reference: *ok* is within the tolerance table, **WRONG** is not (a wrong variant is still timed).",
        "",
        f"![latency against context]({PLOT_FILE})",
        "",
        "## Median latency per call",
        "",
        table(median_headers(document), median_rows(document), ("right",) * (1 + len(variants) + len(variants) - 1)),
        "",
        "## Spread over processes",
        "",
        "*used* is max |got - want| / (atol + rtol |want|) of the checked output: 1 is the edge.",
        "",
        table(
            ("context", "variant", "median", "IQR", "process range", "fastest call", "slowest call", "correct", "used"),
            _spread_rows(document),
            ("right", "left", "right", "right", "right", "right", "right", "left", "right"),
        ),
        "",
    ]  # fmt: skip
    if document["problems"]:
        lines += ["Problems:", "", *(f"- {problem}" for problem in document["problems"]), ""]
    if "comparison" in document:
        lines += comparison_section(document)
    host = document["host"]
    lines += [
        "## Machine and build",
        "",
        f"- Host: {host['cpu']} ({host['cpu_count']} cores), {host['platform']}, Python {host['python']}, MLX {host['mlx']}",
        "- Extension: " + ", ".join(f"{key} = {inline_code(str(value))}" for key, value in build.items()),
        "",
    ]
    return "\n".join(lines)
