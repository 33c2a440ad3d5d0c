"""conformance.md: which invariants hold, and the counterexample of every failing check."""

from __future__ import annotations

from typing import Any

from pagecheck.reports.render.markdown import code_block, header_lines, inline_code, table

VERDICT_TEXT = {"pass": "holds", "fail": "**BROKEN**", "error": "**ERROR**", "skip": "skipped", "not_run": "not run"}


def shell_block(command: str) -> str:
    return "\n".join(["```sh", command, "```"])


def start_here_lines(document: dict[str, Any], heading: str) -> list[str]:
    """The block both conformance.md and index.md open with: the crash's cause, or the likely root cause."""
    suite = document["suite"]
    crash = suite["crash"] if suite else None
    if crash is not None:
        return [
            f"{heading} Start here: the invariants suite crashed",
            "",
            f"{crash['what'][0].upper()}{crash['what'][1:]}. No invariant was judged by the checks that did not "
            f"run; this is the end of what pytest wrote ([{crash['log']}]({crash['log']}) has all of it):",
            "",
            code_block(crash["cause"]),
            "",
            *(["Rerun the suite, from any directory (without worker processes, so a crash stops it where it happened):",
               "", shell_block(crash["command"]), ""] if crash["command"] else []),
        ]  # fmt: skip
    cause = document["start_here"]
    if cause is None:
        return []
    later = cause["explains"]
    explains = (
        f" It is listed first of {len(later) + 1} broken invariants; the others may follow from it: "
        + ", ".join(inline_code(i) for i in later) + "."
        if later else ""
    )
    return [
        f"{heading} Start here: {inline_code(cause['invariant'])}",
        "",
        f"Likely cause: {inline_code(cause['invariant'])} is broken, and {cause['why']}.{explains} "
        "(The order is `CAUSE_PRECEDENCE` in `reports/start_here.py`.)",
        "",
        f"First failing check: {inline_code(cause['nodeid'])} ({cause['outcome']})",
        "",
        code_block(cause["message"] or "(no message)"),
        "",
        "Rerun it, from any directory:",
        "",
        shell_block(cause["command"]),
        "",
    ]


def invariants_in_reading_order(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Broken invariants first, likely cause first; then the rest in catalog order."""
    by_id = {inv["id"]: inv for inv in document["invariants"]}
    broken = [by_id[i] for i in document["broken_invariants"] if i in by_id]
    return broken + [inv for inv in document["invariants"] if inv["id"] not in document["broken_invariants"]]


def unchecked_phrase(count: int) -> str:
    noun = "invariant" if count == 1 else "invariants"
    return f"{count} {noun} had no check that ran (all skipped, or none exists): neither shown to hold nor broken"


def course_clauses_phrase(document: dict[str, Any]) -> str:
    """Whether the failures break a course clause (a check that mirrors the course's own tests) or only
    checks beyond the course."""
    course = [inv["id"] for inv in document["invariants"] if inv.get("course_verdict") in ("fail", "error")]
    if not course:
        return ("The course's clauses all hold: every failure is in a check beyond the course (stricter than the "
                "course's own tests).")  # fmt: skip
    return f"Course clauses broken (checks that mirror the course's own tests): {', '.join(inline_code(i) for i in course)}."


def _verdict_line(document: dict[str, Any]) -> str:
    if document["subject_error"]:
        return "**Verdict: ERROR**: the subject did not load, so nothing was checked."
    totals = document["totals"]
    if document["verdict"] == "crash":
        text = "**Verdict: CRASH**: the invariants suite crashed before it reached its verdicts."
        if document["broken_invariants"]:
            names = ", ".join(inline_code(i) for i in document["broken_invariants"])
            text += f" Before it crashed, checks of {names} failed."
        return text
    if document["broken_invariants"]:
        names = ", ".join(inline_code(i) for i in document["broken_invariants"])
        text = (f"**Verdict: FAIL**: {totals['invariants_failed']} of {totals['invariants']} invariants broken, "
                f"likely cause first: {names}. {course_clauses_phrase(document)}")  # fmt: skip
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
        scope = ", beyond the course" if failure.get("scope") == "beyond_course" else ""
        lines += ["", f"- {inline_code(failure['nodeid'])} ({failure['outcome']}{scope})", "",
                  code_block(failure["message"] or "(no message)")]
    return lines + [""]


def render_conformance(document: dict[str, Any]) -> str:
    lines = [
        f"# Conformance: {inline_code(document['subject'])}",
        "",
        header_lines(document),
        "",
        _verdict_line(document),
        "",
        *start_here_lines(document, "##"),
    ]
    if document["subject_error"]:
        lines += ["## Why the subject did not load", "", code_block(document["subject_error"]), ""]
    else:
        totals = document["totals"]
        lines += ["## Invariants", ""]
        if document["invariants"]:
            lines += [
                f"{totals['checks']} checks: {totals['pass']} passed, {totals['fail']} failed, "
                f"{totals['error']} errors, {totals['skip']} skipped."
                + (" Broken invariants come first, likely cause first." if document["broken_invariants"] else ""),
                "",
                table(
                    ("invariant", "verdict", "pass", "fail", "error", "skip", "what it guarantees"),
                    [
                        (inline_code(inv["id"]), VERDICT_TEXT[inv["verdict"]], inv["counts"]["pass"], inv["counts"]["fail"],
                         inv["counts"]["error"], inv["counts"]["skip"], inv["description"])
                        for inv in invariants_in_reading_order(document)
                    ],
                    ("left", "left", "right", "right", "right", "right", "left"),
                ),
                "",
            ]  # fmt: skip
        else:
            lines += ["The suite reported no check, so no invariant was judged.", ""]
        skipped = [inv for inv in document["invariants"] if inv["skip_reasons"]]
        if skipped:
            lines += ["## Why checks were skipped", ""]
            for inv in skipped:
                lines += [f"- {inline_code(inv['id'])}: " + "; ".join(
                    f"{r['reason']} ({r['checks']} check{'s' if r['checks'] > 1 else ''})" for r in inv["skip_reasons"])]
            lines += [""]
        advised = [inv for inv in document["invariants"] if inv["advice"]]
        if advised:
            lines += ["## Advice", "",
                      "Not failures: what passed, and could be clearer (the course does not ask for it).", ""]
            for inv in advised:
                lines += [f"- {inline_code(inv['id'])}, {inline_code(a['nodeid'])}: {a['text']}" for a in inv["advice"]]
            lines += [""]
        broken = [inv for inv in invariants_in_reading_order(document) if inv["failures"]]
        if broken or document["unattributed"]:
            lines += ["## Failing checks and their counterexamples", "", "Likely cause first.", ""]
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
