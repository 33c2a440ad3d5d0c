"""The scoreboard: grades.csv and grades.md, computed from results files and the rubric.

Both are pure functions of their inputs, rows sorted by submission name and
numbers formatted one way, with no times or durations: the same results and
rubric give the same bytes, however the run was split, interrupted or resumed.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pagecheck.invariants.catalog import INVARIANTS
from pagecheck.invariants.course import BEYOND_COURSE_MARK, CLAUSE_SCOPES, COURSE_MARK
from pagecheck.invariants.neutral_skips import is_neutral_skip
from pagecheck.grading.rubric import SCOPES, Clause, Rubric, clauses_of

NOT_CHECKED = "-"


@dataclass(frozen=True)
class Score:
    name: str
    verdict: str  # with the signal for crashes, e.g. "crashed (SIGSEGV)"
    points: dict[Clause, float | None]  # clause -> points earned; None: no check of it ran
    total: float  # the course clauses
    maximum: float
    beyond_total: float  # the clauses beyond the course, a total of their own
    beyond_maximum: float
    flags: tuple[str, ...]  # anti-cheat finding kinds

    def held(self, clause: Clause, rubric: Rubric) -> bool:
        earned = self.points.get(clause)
        return earned is not None and earned == rubric.points_for(clause)

    def clauses(self, scope: str) -> list[Clause]:
        return [clause for clause in self.points if clause.scope == scope]


def format_points(value: float) -> str:
    return f"{round(value, 2):g}"


SIGNAL_NAME = re.compile(r"SIG[A-Z0-9]+")


def verdict_label(document: dict[str, Any]) -> str:
    """The verdict, with the signal for a crash ("crashed (SIGSEGV)"); nothing else of the detail."""
    if document["verdict"] == "crashed" and SIGNAL_NAME.fullmatch(document.get("detail", "")):
        return f"crashed ({document['detail']})"
    return document["verdict"]


def checks_by_invariant(document: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for check in document["checks"]:
        grouped.setdefault(check["invariant"], []).append(check)
    return grouped


def clause_of(check: dict[str, Any]) -> Clause:
    """The clause a check counts for: its invariant, in the scope the suite marked it with."""
    scopes = CLAUSE_SCOPES.get(check["invariant"], SCOPES)
    return Clause(check["invariant"], check.get("scope") if check.get("scope") in scopes else scopes[0])


def checks_by_clause(document: dict[str, Any]) -> dict[Clause, list[dict[str, Any]]]:
    grouped: dict[Clause, list[dict[str, Any]]] = {}
    for check in document["checks"]:
        if check["invariant"] in CLAUSE_SCOPES:
            grouped.setdefault(clause_of(check), []).append(check)
    return grouped


def graded_clauses(invariants: list[str]) -> list[Clause]:
    """The course clauses of these invariants, then their clauses beyond the course."""
    return [clause for scope in SCOPES for clause in clauses_of(invariants, scope)]


def score_result(document: dict[str, Any], rubric: Rubric) -> Score:
    grouped = checks_by_clause(document)
    finished = document["verdict"] == "ok"
    clauses = graded_clauses(document["settings"]["invariants"])
    points: dict[Clause, float | None] = {}
    for clause in clauses:
        worth = rubric.points_for(clause)
        # A check that does not apply (a dtype the subject may decline, and does) is neither passed nor
        # failed: it is left out.
        checks = [c for c in grouped.get(clause, []) if not is_neutral_skip(c)]
        if not finished:
            points[clause] = 0.0
        elif not checks:
            points[clause] = None
        else:
            passed = sum(c["outcome"] == "pass" for c in checks)
            if rubric.scoring == "fraction":
                points[clause] = worth * passed / len(checks)
            else:
                points[clause] = worth if passed == len(checks) else 0.0
    held = {c for c, earned in points.items() if earned is not None and earned == rubric.points_for(c)}
    for clause in clauses:
        needed = [rubric.needed_clause(clause, n) for n in rubric.requires.get(clause.invariant, ())]
        if points[clause] and any(n in points and n not in held for n in needed):
            points[clause] = 0.0
    flags = tuple(sorted({f["kind"] for f in document["findings"]}))

    def total(scope: str) -> tuple[float, float]:
        mine = [c for c in clauses if c.scope == scope]
        earned = sum(points[c] or 0.0 for c in mine)
        return (0.0 if rubric.zeroes(set(flags), scope) else earned), sum(rubric.points_for(c) for c in mine)

    (course, maximum), (beyond, beyond_maximum) = total(COURSE_MARK), total(BEYOND_COURSE_MARK)
    return Score(document["name"], verdict_label(document), points, course, maximum, beyond, beyond_maximum, flags)


def graded_invariants(documents: list[dict[str, Any]]) -> list[str]:
    """Every invariant any result was graded on, in catalog order."""
    present = {i for d in documents for i in d["settings"]["invariants"]}
    return [i for i in INVARIANTS if i in present]


def _cell(score: Score, clause: Clause) -> str:
    if clause not in score.points:
        return ""
    earned = score.points[clause]
    return NOT_CHECKED if earned is None else format_points(earned)


def render_csv(scores: list[Score], invariants: list[str]) -> str:
    """One row per submission: the course clauses, total and max, then the clauses beyond the course with
    their own total and max (columns "<invariant> (beyond the course)", "beyond", "beyond_max")."""
    course, beyond = clauses_of(invariants, COURSE_MARK), clauses_of(invariants, BEYOND_COURSE_MARK)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["submission", "verdict", *(c.label for c in course), "total", "max",
                     *(c.label for c in beyond), "beyond", "beyond_max", "flags"])  # fmt: skip
    for score in scores:
        writer.writerow([score.name, score.verdict, *(_cell(score, c) for c in course), format_points(score.total),
                         format_points(score.maximum), *(_cell(score, c) for c in beyond),
                         format_points(score.beyond_total), format_points(score.beyond_maximum),
                         " ".join(score.flags)])  # fmt: skip
    return buffer.getvalue()


def protections_line(documents: list[dict[str, Any]]) -> str:
    """Which sandbox protections were off while grading, over every result (a machine of a shard run may
    lack what another had)."""
    off = sorted({f"{name} ({state.removeprefix('off: ')})" for document in documents
                  for name, state in document.get("protections", {}).items() if not state.startswith("on")})  # fmt: skip
    if not any(document.get("protections") for document in documents):
        return "Sandbox: no result records its protections."
    return "Sandbox: every protection was on." if not off else "Sandbox protections OFF: " + "; ".join(off) + "."


def _markdown_table(scores: list[Score], clauses: list[Clause], rubric: Rubric, beyond: bool) -> list[str]:
    header = ["submission", "verdict", *(f"{c.invariant} ({format_points(rubric.points_for(c))})" for c in clauses),
              "total", "max", "flags"]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for score in scores:
        total, maximum = (score.beyond_total, score.beyond_maximum) if beyond else (score.total, score.maximum)
        row = [score.name, score.verdict, *(_cell(score, c) for c in clauses), format_points(total),
               format_points(maximum), ", ".join(score.flags)]  # fmt: skip
        lines.append("| " + " | ".join(row) + " |")
    return lines


def render_markdown(
    scores: list[Score], invariants: list[str], rubric: Rubric, overview: list[str] | None = None,
    sandbox: str | None = None,
) -> str:
    """grades.md; `overview` (Markdown lines, pagecheck.grading.class_overview) opens it when given, and
    `sandbox` says which sandbox protections were off."""
    course, beyond = clauses_of(invariants, COURSE_MARK), clauses_of(invariants, BEYOND_COURSE_MARK)
    lines = [
        "# Grades",
        "",
        f"{len(scores)} submissions; rubric `{Path(rubric.source).name}` ({rubric.scoring}). A clause earns "
        "its points when its checks pass on both the public and the hidden inputs; a run that did not finish "
        f"earns nothing; `{NOT_CHECKED}` marks a clause with no check that ran. An invariant's course clause is "
        "made of the checks that mirror the course's own Day 3/4 tests; its clause beyond the course, of the "
        "checks no course test makes. The two have separate totals: a check beyond the course never costs a "
        "course point.",
        "",
        *([sandbox, ""] if sandbox else []),
        *(overview or []),
        *(["## Submissions", ""] if overview else []),
        *(["The course's clauses:", ""] if beyond else []),
        *_markdown_table(scores, course, rubric, beyond=False),
    ]
    if beyond:
        lines += ["", "Beyond the course:", "", *_markdown_table(scores, beyond, rubric, beyond=True)]
    return "\n".join(lines) + "\n"


def scores_for(documents: list[dict[str, Any]], rubric: Rubric) -> list[Score]:
    return [score_result(d, rubric) for d in sorted(documents, key=lambda d: d["name"])]
