"""index.md: the verdicts and headline numbers of a report directory on one screen."""

from __future__ import annotations

from typing import Any

from pagecheck.reports.render.bench import PLOT_FILE, median_headers, median_rows, shape_line
from pagecheck.reports.render.bench_gpu import goal_table
from pagecheck.reports.render.conformance import VERDICT_TEXT, unchecked_phrase
from pagecheck.reports.render.markdown import inline_code, table
from pagecheck.reports.render.tolerance import describe_cell, worst_rows

TITLES = {
    "conformance": "Conformance",
    "tolerance": "Tolerance sweep",
    "bench": "Operator benchmark",
    "bench_gpu": "GPU kernel benchmark",
}


def _environment_line(environment: dict[str, Any]) -> str:
    source = environment.get("source")
    commit = source["commit"] if source else None
    revision = f", commit {commit[:10]}{' (modified)' if source['dirty'] else ''}" if commit else ""
    return (
        f"{environment['cpu']} ({environment['cpu_count']} cores), {environment['os']}, "
        f"MLX {environment['mlx']}, pagecheck {environment['pagecheck']}{revision}"
    )


def _conformance_summary(document: dict[str, Any]) -> list[str]:
    if document.get("subject_error"):
        return [f"The subject did not load: {inline_code(document['subject_error'])}"]
    totals = document["totals"]
    rows = [
        (inline_code(inv["id"]), VERDICT_TEXT[inv["verdict"]], f"{inv['counts']['pass']}/{inv['counts']['total']}")
        for inv in document["invariants"]
    ]
    return [
        f"{totals['invariants_held']} of {totals['invariants']} invariants hold, {totals['invariants_failed']} broken "
        f"({totals['pass']} of {totals['checks']} checks passed, {totals['skip']} skipped).",
        "",
        table(("invariant", "verdict", "checks passed"), rows, ("left", "left", "right")),
    ]


def _tolerance_summary(document: dict[str, Any]) -> list[str]:
    totals = document["totals"]
    lines = [f"{totals['passed']} of {totals['rows']} cells within tolerance of both oracles.", ""]
    worst = worst_rows(document, 1)
    if worst:
        row = worst[0]
        if row["error"] is not None:
            lines.append(f"Worst cell: {describe_cell(row)} raised {inline_code(row['error'])}.")
        else:
            ref = row["vs_reference"]
            lines.append(
                f"Worst cell: {describe_cell(row)}: max abs error {ref['max_abs_error']:.2e}, rel L2 "
                f"{ref['rel_l2_error']:.2e} vs float64; it uses {max(ref['allowance_used'], row['vs_mlx_oracle']['allowance_used']):.3f} "
                f"of its allowance (atol {row['atol']:.2e}, rtol {row['rtol']:.2e}; 1 is the limit)."
            )
    return lines


def _bench_summary(document: dict[str, Any]) -> list[str]:
    config = document["configuration"]
    return [
        f"Median latency per call, {shape_line(config)}, {config['device']}; the plot is in [bench.md](bench.md).",
        "",
        table(median_headers(document), median_rows(document), ("right",) * (len(config["variants"]) + 3)),
        "",
        f"Correctness of the benchmarked variants: {'pass' if document['correct'] else '**FAIL**'} "
        f"(max abs error within atol {document['atol']:.2e} of float64).",
    ]


def _overall(documents: dict[str, dict[str, Any]]) -> str:
    problems = []
    conformance = documents.get("conformance")
    if conformance is not None:
        if conformance.get("subject_error"):
            problems.append("the subject did not load")
        broken = conformance["broken_invariants"]
        if broken:
            problems.append("broken invariants: " + ", ".join(inline_code(i) for i in broken))
        if conformance["suite"] and conformance["suite"]["problem"]:
            problems.append(conformance["suite"]["problem"])
    tolerance = documents.get("tolerance")
    if tolerance is not None and not tolerance["passed"]:
        problems.append(f"{tolerance['totals']['failed']} tolerance cells failed")
    bench = documents.get("bench")
    if bench is not None and not bench["correct"]:
        problems.append("a benchmarked variant raised or is outside atol of float64 (see bench.md)")
    if problems:
        return "**Verdict: FAIL**: " + "; ".join(problems) + "."
    unchecked = conformance["totals"]["invariants_unchecked"] if conformance is not None else 0
    return "**Verdict: PASS**" + (f"; {unchecked_phrase(unchecked)}." if unchecked else "")


def render_index(documents: dict[str, dict[str, Any]]) -> str:
    if not documents:
        raise ValueError("documents is empty: there is no report to index")
    first = next(iter(documents.values()))
    lines = [
        f"# pagecheck report: {inline_code(first['subject'])}",
        "",
        f"Device {first['device']}, {first['profile']} profile, seed {first['seed']}, created {first['created']}.  ",
        _environment_line(first["environment"]),
        "",
        _overall(documents),
        "",
    ]
    extras = {"conformance": ", [pytest log](invariants.log)", "bench": f", [plot]({PLOT_FILE})"}
    links = [
        f"- [{TITLES[kind]}]({kind}.md) ([JSON]({kind}.json){extras.get(kind, '')})" for kind in TITLES if kind in documents
    ]
    lines += ["Files:", "", *links, ""]
    if "conformance" in documents:
        lines += ["## Invariants", "", *_conformance_summary(documents["conformance"]), ""]
    if "tolerance" in documents:
        lines += ["## Tolerance", "", *_tolerance_summary(documents["tolerance"]), ""]
    if "bench" in documents:
        lines += ["## Benchmark", "", *_bench_summary(documents["bench"]), ""]
    if "bench_gpu" in documents:
        lines += [
            "## GPU kernel speed goals",
            "",
            "Reported, not asserted; every row is in [bench_gpu.md](bench_gpu.md).",
            "",
            goal_table(documents["bench_gpu"]),
            "",
        ]
    return "\n".join(lines)
