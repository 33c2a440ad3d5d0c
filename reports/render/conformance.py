"""conformance.md: which invariants hold, and the counterexample of every failing check."""

from __future__ import annotations

from typing import Any

from pagecheck.reports.render.markdown import code_block, header_lines, inline_code, table

VERDICT_TEXT = {"pass": "holds", "fail": "**BROKEN**", "error": "**ERROR**", "skip": "skipped", "not_run": "not run"}


def unchecked_phrase(count: int) -> str:
    noun = "invariant" if count == 1 else "invariants"
    return f"{count} {noun} had no check that ran (all skipped, or none exists): neither shown to hold nor broken"


def _verdict_line(document: dict[str, Any]) -> str:
    if document["subject_error"]:
        return "**Verdict: ERROR**: the subject did not load, so nothing was checked."
    totals = document["totals"]
    if document["broken_invariants"]:
        names = ", ".join(inline_code(i) for i in document["broken_invariants"])
        text = f"**Verdict: FAIL**: {totals['invariants_failed']} of {totals['invariants']} invariants broken: {names}."
    elif document["verdict"] == "error":
        text = "**Verdict: ERROR**: the suite did not run to completion."
    else:
        text = f"**Verdict: PASS**: {totals['invariants_held']} of {totals['invariants']} invariants hold."
    if totals["invariants_unchecked"] and not document["broken_invariants"]:
        text += f" {unchecked_phrase(totals['invariants_unchecked'])}."
    problem = document["suite"]["problem"] if document["suite"] else None
    return text + (f" {problem[0].upper()}{problem[1:]}." if problem else "")


def source_text(source: dict[str, Any] | None) -> str:
    if source is None:
        return "an index or unknown (no PEP 610 record)"
    text = f"{inline_code(source['url'])}{' (editable)' if source['editable'] else ''}"
    if source["commit"]:
        text += f", commit {source['commit']}{' (uncommitted changes)' if source['dirty'] else ''}"
    return text


def environment_list(environment: dict[str, Any]) -> str:
    devices = environment["devices"]
    source = environment["source"]
    extension = environment["extension"]
    rows = [
        ("OS", environment["os"]),
        ("CPU", f"{environment['cpu']} ({environment['cpu_count']} cores)"),
        ("GPU", f"{devices['gpu'].get('device_name', '?')} ({devices['gpu_backend']})" if devices["gpu"] else "none"),
        ("Python", environment["python"]),
        ("MLX", environment["mlx"]),
        ("NumPy", environment["numpy"]),
        ("pagecheck", environment["pagecheck"]),
        ("Installed from", source_text(source)),
        ("Extension", ", ".join(f"{k} = {inline_code(str(v))}" for k, v in extension.items())
         if isinstance(extension, dict) else extension),
    ]  # fmt: skip
    return "\n".join(f"- **{name}:** {value}" for name, value in rows)


def _failure_section(invariant: dict[str, Any]) -> list[str]:
    failures = invariant["failures"]
    lines = [
        f"### {inline_code(invariant['id'])}",
        "",
        f"{invariant['description']}.",
        "",
        f"{len(failures)} of {invariant['counts']['total']} checks did not pass.",
    ]
    for failure in failures:
        lines += ["", f"- {inline_code(failure['nodeid'])} ({failure['outcome']})", "", code_block(failure["message"] or "(no message)")]
    return lines + [""]


def render_conformance(document: dict[str, Any]) -> str:
    lines = [
        f"# Conformance: {inline_code(document['subject'])}",
        "",
        header_lines(document),
        "",
        _verdict_line(document),
        "",
    ]
    if document["subject_error"]:
        lines += ["## Why the subject did not load", "", code_block(document["subject_error"]), ""]
    else:
        totals = document["totals"]
        lines += [
            "## Invariants",
            "",
            f"{totals['checks']} checks: {totals['pass']} passed, {totals['fail']} failed, "
            f"{totals['error']} errors, {totals['skip']} skipped.",
            "",
            table(
                ("invariant", "verdict", "pass", "fail", "error", "skip", "what it guarantees"),
                [
                    (inline_code(inv["id"]), VERDICT_TEXT[inv["verdict"]], inv["counts"]["pass"], inv["counts"]["fail"],
                     inv["counts"]["error"], inv["counts"]["skip"], inv["description"])
                    for inv in document["invariants"]
                ],
                ("left", "left", "right", "right", "right", "right", "left"),
            ),
            "",
        ]  # fmt: skip
        skipped = [inv for inv in document["invariants"] if inv["skip_reasons"]]
        if skipped:
            lines += ["## Why checks were skipped", ""]
            for inv in skipped:
                lines += [f"- {inline_code(inv['id'])}: " + "; ".join(
                    f"{r['reason']} ({r['checks']} check{'s' if r['checks'] > 1 else ''})" for r in inv["skip_reasons"])]
            lines += [""]
        broken = [inv for inv in document["invariants"] if inv["failures"]]
        if broken or document["unattributed"]:
            lines += ["## Failing checks and their counterexamples", ""]
            for invariant in broken:
                lines += _failure_section(invariant)
            for failure in document["unattributed"]:
                lines += [f"- {inline_code(failure['nodeid'])} (no invariant)", "", code_block(failure["message"]), ""]
        suite = document["suite"]
        selected = suite["selected_invariants"]
        lines += [
            "## Suite run",
            "",
            f"- Command: {inline_code(' '.join(suite['command']))}",
            f"- pytest exit status {suite['returncode']}, {suite['elapsed_s']:.1f} s; full output in [{suite['log']}]({suite['log']})",
            f"- Invariants run: {', '.join(selected) if selected else 'all'}; Hypothesis profile "
            f"{inline_code(str(suite['hypothesis_profile']))} (`invariants/profiles.py`)",
            "",
        ]
    lines += ["## Environment", "", environment_list(document["environment"]), ""]
    return "\n".join(lines)
