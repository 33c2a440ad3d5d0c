"""feedback/<name>.md: what a student sees about their submission.

Course clauses first, then the clauses beyond the course (an invariant's
checks that no course test makes; they count apart from the total). For each
clause that did not earn its points: the checks that failed,
their counterexample, and a command that reruns the check on the public
inputs, in the same sandbox. A failure that only the hidden inputs showed is
reported as the check's name and the fact only: no message, no
counterexample, nothing the submission printed or raised (any of it could
carry the hidden inputs); the student is pointed at a wider public search
instead. The same holds for a run that did not finish on the hidden inputs.
Nothing here names the secret or the hidden seed (any digits of the hidden
seed in a message are masked too), and nothing depends on time, so feedback
files are reproducible too. Text from the submission (its messages, file
names, what its worker reported) is shown literally: messages as code
blocks, places and findings' details as one-line code spans fenced past
their backticks, so none of it becomes a heading, a link or HTML.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from pagecheck.invariants.catalog import INVARIANTS
from pagecheck.invariants.course import BEYOND_COURSE_MARK, COURSE_MARK
from pagecheck.invariants.neutral_skips import is_neutral_skip
from pagecheck.invariants.runner import rerun_command
from pagecheck.grading.child_plugin import PLUGIN
from pagecheck.grading.rubric import Clause, Rubric
from pagecheck.grading.scoreboard import Score, checks_by_clause, format_points, score_result
from pagecheck.grading.seeds import PUBLIC_SEED
from pagecheck.invariants.subject import SANDBOX_PREFIX

HIDDEN_MASK = "<hidden seed>"
RUN_PROBLEMS = {
    "build-failed": "The C++ extension did not build, and the Python code does not load without it.",
    "load-failed": "The subject could not be imported, so no check ran.",
    "crashed": "The process running the checks died.",
    "timed-out": "The checks did not finish within the time limit.",
    "out-of-memory": "The checks ran out of memory.",
}
FINDING_TEXT = {
    "sdpa_call": "The course's source check: paged_attention's source must not name mx.fast or "
    "scaled_dot_product_attention.",
    "dense_gather": "The course's source check: paged_attention's source must not name gather_dense.",
    "sdpa_route": "Beyond the course: paged attention should read K/V through the block table itself, not reach "
    "MLX's SDPA.",
    "dense_route": "Beyond the course: paged attention should not call gather_dense or a dense attention helper.",
    "page_join": "Beyond the course: paged attention should not join the pages into dense K/V.",
    "sdpa_trap": "Beyond the course: mx.fast.scaled_dot_product_attention was called while paged attention ran "
    "(it raises during grading).",
    "gather_trap": "Beyond the course: paged attention should read K/V page by page, not gather a request's "
    "pages into one array.",
    "project_import": "A submission must not use the grader's own code.",
    "tamper": "A submission must not reach for the grader's objects.",
    "unscanned": "The grader could not read this file's syntax tree, so a reviewer will read it instead; it costs "
    "no points.",
    "entry_unresolved": "The grader could not tell from the source which function paged_attention is, so a "
    "reviewer will read it instead; it costs no points.",
}


def _hidden_seeds(document: dict[str, Any]) -> list[str]:
    return [str(p["seed"]) for p in document["passes"] if p["kind"] == "hidden"]


def _masked(text: str, document: dict[str, Any]) -> str:
    for seed in _hidden_seeds(document):
        text = text.replace(seed, HIDDEN_MASK)
    return text


def _quoted(text: str, within: str = "") -> list[str]:
    """`text` as an indented code block, literal in Markdown and HTML; `within` is the indentation of the list
    item it belongs to (a block indented 4 inside an item indented 2 would be a paragraph of the item)."""
    return [within + "    " + line for line in (text.strip() or "(no message)").splitlines()]


def _one_line(text: str) -> str:
    """`text` on one line: control and format characters (newlines, bidirectional overrides) and the line and
    paragraph separators each become a space."""
    return "".join(" " if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") else c for c in text)


def _code(text: str) -> str:
    """Text from a submission (a place, a finding's detail) as an inline code span on one line, which Markdown
    shows literally (no heading, emphasis, link or HTML): fenced with one backtick more than its longest run."""
    line = _one_line(text).strip() or "(none)"
    fence = "`" * (max((len(run) for run in re.findall("`+", line)), default=0) + 1)
    return f"{fence} {line} {fence}"


def check_command(nodeid: str, document: dict[str, Any]) -> str:
    """The command that reruns one check on the public inputs from any directory, as grading runs it: the
    submission in the sandboxed worker (tripwires armed), every call's inputs checked."""
    subject = f"{SANDBOX_PREFIX}{document['student_spec']}"
    return rerun_command(nodeid, subject=subject, seed=PUBLIC_SEED, extra=["-p", PLUGIN])


def _check_lines(check: dict[str, Any], document: dict[str, Any]) -> list[str]:
    name = check["nodeid"].split("::", 1)[-1]
    on = " and ".join(f"{kind} inputs" for kind in check["passes"]) or "both passes"
    lines = [f"- `{name}`: {check['outcome']} on {on}", ""]
    if "public" in check["passes"]:
        lines += _quoted(_masked(check["message"], document), within="  ") + [""]
        lines += ["  Reproduce:", "", f"    {check_command(check['nodeid'], document)}", ""]
    else:
        lines += ["  Only the hidden inputs showed this. Search wider on public inputs:", "",
                  f"    {check_command(check['nodeid'], document)} --pagecheck-profile thorough", ""]  # fmt: skip
    return lines


def _run_problem(document: dict[str, Any]) -> list[str]:
    verdict = document["verdict"]
    lines = ["## The run did not finish", "", f"Verdict: **{verdict}**. {RUN_PROBLEMS[verdict]} No points are given.", ""]
    if document.get("failed_pass") not in (None, "public"):
        lines += [f"It happened on the {document['failed_pass']} inputs.", ""]
        return lines
    if document.get("detail"):
        lines += _quoted(_masked(document["detail"], document)) + [""]
    running = document.get("running_check")
    if running:
        lines += [f"It happened during `{running.split('::', 1)[-1]}` on the {document['failed_pass']} inputs.", ""]
        command = check_command(running, document)
        if document["failed_pass"] != "public":
            command += " --pagecheck-profile thorough"
        lines += ["Rerun that check:", "", f"    {command}", ""]
    return lines


def _neutral_reasons(document: dict[str, Any]) -> dict[str, int]:
    """Each kind of neutral skip with its count: the fixed start of its reason only (what follows may quote
    the submission, which hidden-input feedback never shows)."""
    counts: dict[str, int] = {}
    for check in document["checks"]:
        if is_neutral_skip(check):
            reason = check["message"].split(":", 1)[0]
            counts[reason] = counts.get(reason, 0) + 1
    return dict(sorted(counts.items()))


SCOPE_HEADINGS = {COURSE_MARK: "Course clauses", BEYOND_COURSE_MARK: "Beyond the course"}


def _clause_lines(document: dict[str, Any], grouped: dict[Clause, list[dict[str, Any]]], score: Score,
                  rubric: Rubric, scope: str) -> list[str]:  # fmt: skip
    """The clauses of one scope that did not earn their points, each with its failed checks (`grouped`, by
    clause); then those met."""
    clauses = score.clauses(scope)
    missed = [c for c in clauses if not score.held(c, rubric)]
    held = [c.invariant for c in clauses if score.held(c, rubric)]
    lines: list[str] = []
    if missed:
        lines += [f"## {SCOPE_HEADINGS[scope]}: not met", ""]
        for clause in missed:
            earned = score.points[clause]
            worth = format_points(rubric.points_for(clause))
            got = "no check ran" if earned is None else f"{format_points(earned)} of {worth} points"
            lines += [f"### {clause.label} ({got})", "", INVARIANTS[clause.invariant] + ".", ""]
            failed = [c for c in grouped.get(clause, []) if c["outcome"] != "pass" and not is_neutral_skip(c)]
            for check in failed:
                lines += _check_lines(check, document)
            if grouped.get(clause) and not failed and clause.invariant in rubric.requires:
                needed = ", ".join(rubric.requires[clause.invariant])
                lines += [f"Its checks passed, but it earns points only when {needed} is met too.", ""]
    if held:
        lines += [f"## {SCOPE_HEADINGS[scope]}: met", "", ", ".join(held) + ".", ""]
    return lines


def render_feedback(document: dict[str, Any], rubric: Rubric) -> str:
    score: Score = score_result(document, rubric)
    beyond = f" Beyond the course: **{format_points(score.beyond_total)}** of {format_points(score.beyond_maximum)}."
    lines = [
        f"# Feedback for {document['name']}",
        "",
        f"Verdict: **{score.verdict}**. Total: **{format_points(score.total)}** of {format_points(score.maximum)} "
        f"points.{beyond if score.clauses(BEYOND_COURSE_MARK) else ''}",
        "",
        "The total counts the checks that mirror the course's own tests; checks that go beyond the course count "
        "apart, and never cost a course point.",
        "",
        f"Every check ran twice: on the public inputs (seed {PUBLIC_SEED}, the suite's default) and on hidden "
        "inputs drawn for grading. The commands below run from any directory where pagecheck is installed.",
        "",
    ]
    if document["verdict"] != "ok":
        lines += _run_problem(document)
    if document.get("build") and not document["build"]["ok"] and document["verdict"] != "build-failed":
        lines += [f"Note: the extension build failed ({document['build']['detail']}); the checks ran without it.", ""]
    if document["findings"]:
        lines += ["## Anti-cheat findings", ""]
        kinds = {f["kind"] for f in document["findings"]}
        if rubric.zeroes(kinds, COURSE_MARK):
            lines += ["These set the total to 0.", ""]
        elif rubric.zeroes(kinds, BEYOND_COURSE_MARK):
            lines += ["These set the total beyond the course to 0; the course clauses keep their points.", ""]
        # Places and details come from the submission: its file names, and what its worker reported.
        for finding in document["findings"]:
            place = _code(f"{finding['file']}:{finding['line']}" if finding["file"] else "(no place)")
            detail = _code(_masked(finding["detail"], document))
            lines.append(f"- {place} ({finding['kind']}): {detail}. {FINDING_TEXT[finding['kind']]}")
        lines.append("")
    if document["verdict"] == "ok":
        grouped = checks_by_clause(document)
        lines += _clause_lines(document, grouped, score, rubric, COURSE_MARK)
        lines += _clause_lines(document, grouped, score, rubric, BEYOND_COURSE_MARK)
    neutral = _neutral_reasons(document)
    if neutral and document["verdict"] == "ok":
        lines += ["## Not applicable", "", "Skipped checks that count neither as passed nor as failed:", ""]
        lines += [f"- {reason} ({count} check{'s' if count > 1 else ''})" for reason, count in neutral.items()]
        lines += [""]
    return "\n".join(lines).rstrip("\n") + "\n"
