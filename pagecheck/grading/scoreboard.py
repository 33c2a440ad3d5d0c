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
from pagecheck.invariants.neutral_skips import is_neutral_skip
from pagecheck.grading.rubric import Rubric

NOT_CHECKED = "-"


@dataclass(frozen=True)
class Score:
    name: str
    verdict: str  # with the signal for crashes, e.g. "crashed (SIGSEGV)"
    points: dict[str, float | None]  # invariant -> points earned; None: no check of it ran
    total: float
    maximum: float
    flags: tuple[str, ...]  # anti-cheat finding kinds

    def held(self, invariant: str, rubric: Rubric) -> bool:
        earned = self.points.get(invariant)
        return earned is not None and earned == rubric.points_for(invariant)


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


def score_result(document: dict[str, Any], rubric: Rubric) -> Score:
    grouped = checks_by_invariant(document)
    finished = document["verdict"] == "ok"
    points: dict[str, float | None] = {}
    for invariant in document["settings"]["invariants"]:
        worth = rubric.points_for(invariant)
        # A check that does not apply (a dtype the subject may decline, and does; an injection the sandbox
        # cannot carry) is neither passed nor failed: it is left out.
        checks = [c for c in grouped.get(invariant, []) if not is_neutral_skip(c)]
        if not finished:
            points[invariant] = 0.0
        elif not checks:
            points[invariant] = None
        else:
            passed = sum(c["outcome"] == "pass" for c in checks)
            if rubric.scoring == "fraction":
                points[invariant] = worth * passed / len(checks)
            else:
                points[invariant] = worth if passed == len(checks) else 0.0
    held = {i for i, earned in points.items() if earned is not None and earned == rubric.points_for(i)}
    for invariant, needed in rubric.requires.items():
        if points.get(invariant) and any(n in points and n not in held for n in needed):
            points[invariant] = 0.0
    flags = tuple(sorted({f["kind"] for f in document["findings"]}))
    total = 0.0 if rubric.zeroes_total(set(flags)) else sum(p for p in points.values() if p is not None)
    maximum = sum(rubric.points_for(i) for i in document["settings"]["invariants"])
    return Score(document["name"], verdict_label(document), points, total, maximum, flags)


def graded_invariants(documents: list[dict[str, Any]]) -> list[str]:
    """Every invariant any result was graded on, in catalog order."""
    present = {i for d in documents for i in d["settings"]["invariants"]}
    return [i for i in INVARIANTS if i in present]


def _cell(score: Score, invariant: str) -> str:
    if invariant not in score.points:
        return ""
    earned = score.points[invariant]
    return NOT_CHECKED if earned is None else format_points(earned)


def render_csv(scores: list[Score], invariants: list[str]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["submission", "verdict", *invariants, "total", "max", "flags"])
    for score in scores:
        writer.writerow([score.name, score.verdict, *(_cell(score, i) for i in invariants),
                         format_points(score.total), format_points(score.maximum), " ".join(score.flags)])  # fmt: skip
    return buffer.getvalue()


def protections_line(documents: list[dict[str, Any]]) -> str:
    """Which sandbox protections were off while grading, over every result (a machine of a shard run may
    lack what another had)."""
    off = sorted({f"{name} ({state.removeprefix('off: ')})" for document in documents
                  for name, state in document.get("protections", {}).items() if not state.startswith("on")})  # fmt: skip
    if not any(document.get("protections") for document in documents):
        return "Sandbox: no result records its protections."
    return "Sandbox: every protection was on." if not off else "Sandbox protections OFF: " + "; ".join(off) + "."


def render_markdown(
    scores: list[Score], invariants: list[str], rubric: Rubric, overview: list[str] | None = None,
    sandbox: str | None = None,
) -> str:
    """grades.md; `overview` (Markdown lines, pagecheck.grading.class_overview) opens it when given, and
    `sandbox` says which sandbox protections were off."""
    header = ["submission", "verdict", *(f"{i} ({format_points(rubric.points_for(i))})" for i in invariants),
              "total", "max", "flags"]  # fmt: skip
    lines = [
        "# Grades",
        "",
        f"{len(scores)} submissions; rubric `{Path(rubric.source).name}` ({rubric.scoring}). An invariant earns "
        "its points when its checks pass on both the public and the hidden inputs; a run that did not finish "
        f"earns nothing; `{NOT_CHECKED}` marks an invariant with no check that ran.",
        "",
        *([sandbox, ""] if sandbox else []),
        *(overview or []),
        *(["## Submissions", ""] if overview else []),
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    for score in scores:
        row = [score.name, score.verdict, *(_cell(score, i) for i in invariants),
               format_points(score.total), format_points(score.maximum), ", ".join(score.flags)]  # fmt: skip
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def scores_for(documents: list[dict[str, Any]], rubric: Rubric) -> list[Score]:
    return [score_result(d, rubric) for d in sorted(documents, key=lambda d: d["name"])]
