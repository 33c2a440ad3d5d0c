"""index.md: the verdicts and headline numbers of a report directory on one screen."""

from __future__ import annotations

from typing import Any

from pagecheck.reports.render.bench import PLOT_FILE, measured_outputs_correct, median_headers, median_rows, shape_line
from pagecheck.reports.render.bench_gpu import goal_table
from pagecheck.reports.render.conformance import VERDICT_TEXT, invariants_in_reading_order, start_here_lines, unchecked_phrase
from pagecheck.reports.render.markdown import inline_code, table
from pagecheck.reports.render.tolerance import stage_verdict, worst_cell_lines
from pagecheck.reports.render.tolerance_plot import PLOT_FILE as TOLERANCE_PLOT_FILE

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
    if not document["invariants"]:
        return ["The suite reported no check, so no invariant was judged (see Start here above)."]
    rows = [
        (inline_code(inv["id"]), VERDICT_TEXT[inv["verdict"]], f"{inv['counts']['pass']}/{inv['counts']['total']}")
        for inv in invariants_in_reading_order(document)
    ]
    crashed = " The suite crashed, so these counts are of the checks that ran before it did." if document["verdict"] == "crash" else ""
    return [
        f"{totals['invariants_held']} of {totals['invariants']} invariants hold, {totals['invariants_failed']} broken "
        f"({totals['pass']} of {totals['checks']} checks passed, {totals['skip']} skipped)"
        + ("; broken ones first, likely cause first." if document["broken_invariants"] else ".") + crashed,
        "",
        table(("invariant", "verdict", "checks passed"), rows, ("left", "left", "right")),
    ]


def _tolerance_summary(document: dict[str, Any]) -> list[str]:
    totals = document["totals"]
    plot = f" ([plot]({document['plot']}))" if document.get("plot") else ""
    declined = totals.get("declined", 0)
    unsupported = f"; {declined} unsupported (the subject declines their dtype)" if declined else ""
    return [*_interrupted_line(document, "cells"),
            f"{totals['passed']} of {totals['rows']} cells within tolerance of both oracles{unsupported}{plot}.", "",
            *worst_cell_lines(document)]  # fmt: skip


def _interrupted_line(document: dict[str, Any], unit: str) -> list[str]:
    """An interrupted stage's record says how far it got (its "interrupted"), before its figures."""
    stopped = document.get("interrupted")
    if stopped is None:
        return []
    return [f"**INCOMPLETE:** interrupted after {stopped['finished']} of {stopped['planned']} {unit}; "
            "the figures below are those that finished.", ""]


def _bench_summary(document: dict[str, Any]) -> list[str]:
    config = document["configuration"]
    headers = median_headers(document)
    lines = [
        *_interrupted_line(document, "contexts"),
        f"Median latency per call with each output's correctness mark, {shape_line(config)}, {config['device']}; "
        "the spread over processes and the plot are in [bench.md](bench.md).",
        "",
        table(headers, median_rows(document), ("right",) * len(headers)),
        "",
    ]
    if document["subject_correct"]:
        lines.append("The subject's outputs are within tolerance of the float64 reference at every context.")
    else:
        lines.append(
            "**The subject's outputs are WRONG** (outside tolerance of the float64 reference): its times are those "
            "of a wrong implementation."
        )
    if not document["correct"] and document["subject_correct"]:
        lines.append("A variant other than the subject raised or is outside tolerance (see bench.md).")
    comparison = document.get("comparison")
    if comparison is not None:
        flagged = [row for row in comparison["rows"] if row["change"] in ("slower", "faster")]
        named = ", ".join(f"{row['variant']} at {row['context']} {row['change']} ({row['ratio']:.2f}x)" for row in flagged)
        lines += ["", f"Compared with {inline_code(comparison['previous'])}: {len(flagged)} of {len(comparison['rows'])} "
                  f"points changed beyond the noise{': ' + named if named else ''}"
                  + (f" ([plot]({comparison['plot']}))." if comparison["plot"] else ".")]  # fmt: skip
    return lines


def _overall(documents: dict[str, dict[str, Any]], unfinished: tuple[str, ...] = (),
             missing: tuple[str, ...] = ()) -> str:  # fmt: skip
    problems = []
    if unfinished:
        problems.append("stopped before " + ", ".join(inline_code(stage) for stage in unfinished)
                        + " finished (interrupted, or its process ended)")
    if missing:
        problems.append("the subject has no " + ", ".join(inline_code(name) for name in missing)
                        + ", so the checks that need it did not run")
    conformance = documents.get("conformance")
    if conformance is not None:
        if conformance.get("subject_error"):
            problems.append("the subject did not load")
        broken = conformance["broken_invariants"]
        if broken:
            failed = conformance["totals"]["course_clauses_failed"]
            course = (
                "the course's own clauses all hold: every failure is beyond the course" if failed == 0
                else f"{failed} of them break{'s' if failed == 1 else ''} a clause the course's own tests check"
            )
            problems.append(
                "broken invariants, likely cause first: " + ", ".join(inline_code(i) for i in broken) + f" ({course})"
            )
        if conformance["suite"] and conformance["suite"]["problem"]:
            problems.append(conformance["suite"]["problem"])
    # An interrupted stage is not passed (it did not measure everything): a problem only for what failed in it.
    tolerance = documents.get("tolerance")
    if tolerance is not None and stage_verdict(tolerance["passed"], tolerance["totals"]["failed"], tolerance) == "FAIL":
        problems.append(f"{tolerance['totals']['failed']} tolerance cells failed")
    bench = documents.get("bench")
    if bench is not None and not bench["subject_correct"]:
        problems.append("the subject's benchmarked outputs are outside tolerance of float64 (see bench.md)")
    elif bench is not None and not bench["correct"] and (bench.get("interrupted") is None
                                                        or not measured_outputs_correct(bench)):
        problems.append("a benchmarked variant raised or is outside tolerance of float64 (see bench.md)")
    crashed = conformance is not None and conformance["verdict"] == "crash"
    if problems:
        word = "CRASH" if crashed else "FAIL" if len(problems) > bool(unfinished) + bool(missing) else "INCOMPLETE"
        return f"**Verdict: {word}**: " + "; ".join(problems) + "."
    unchecked = conformance["totals"]["invariants_unchecked"] if conformance is not None else 0
    return "**Verdict: PASS**" + (f"; {unchecked_phrase(unchecked)}." if unchecked else "")


def render_index(documents: dict[str, dict[str, Any]], unfinished: tuple[str, ...] = (),
                 missing: tuple[str, ...] = ()) -> str:  # fmt: skip
    if not documents:
        raise ValueError("documents is empty: there is no report to index")
    first = next(iter(documents.values()))
    lines = [
        f"# pagecheck report: {inline_code(first['subject'])}",
        "",
        *(start_here_lines(documents["conformance"], "##") if "conformance" in documents else []),
        f"Device {first['device']}, {first['profile']} profile, seed {first['seed']}, created {first['created']}.  ",
        _environment_line(first["environment"]),
        "",
        _overall(documents, unfinished, missing),
        "",
    ]
    extras = {"conformance": ", [pytest log](invariants.log)", "bench": f", [plot]({PLOT_FILE})",
              "tolerance": f", [plot]({TOLERANCE_PLOT_FILE})"}  # fmt: skip
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
