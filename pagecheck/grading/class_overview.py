"""The class overview that opens grades.md: how the points are spread, and which invariants most submissions broke.

Both parts are pure functions of the scores and results, like the rest of the
scoreboard: the same results give the same bytes, plots included.

- Points: a histogram of the submissions' totals in HISTOGRAM_BINS equal bins
  from 0 to the largest maximum; every submission counts, including runs
  that did not finish (they score 0).
- Broken invariants: per invariant, the share of the submissions whose run
  finished and ran a check of it (not all skipped) that failed at least one
  such check, on the public or the hidden inputs. Most-broken first; ties
  keep catalog order. The table tells the submissions that failed a course
  check from those that failed only checks beyond the course. Runs that did
  not finish are counted apart: they broke nothing in particular.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pagecheck.invariants.course import BEYOND_COURSE_MARK
from pagecheck.grading.scoreboard import Score, checks_by_invariant, clause_of, format_points
from pagecheck.reports.render.svg_plot import Bar, bar_chart

POINTS_PLOT_FILE = "grades-points.svg"
BROKEN_PLOT_FILE = "grades-broken.svg"
HISTOGRAM_BINS = 10
FAILED_OUTCOMES = ("fail", "error")


@dataclass(frozen=True)
class BrokenShare:
    invariant: str
    broken: int  # finished submissions that failed a check of it
    checked: int  # finished submissions that ran a check of it
    beyond_only: int = 0  # of `broken`, those whose failed checks all go beyond the course

    @property
    def share(self) -> float:
        return self.broken / self.checked if self.checked else 0.0


def broken_shares(documents: list[dict[str, Any]], invariants: list[str]) -> list[BrokenShare]:
    """Per graded invariant, how many finished submissions broke it; most-broken first."""
    finished = [d for d in documents if d["verdict"] == "ok"]
    shares = []
    for invariant in invariants:
        broken = checked = beyond_only = 0
        for document in finished:
            checks = [c for c in checks_by_invariant(document).get(invariant, []) if c["outcome"] != "skip"]
            if checks:
                checked += 1
                failed = [c for c in checks if c["outcome"] in FAILED_OUTCOMES]
                broken += bool(failed)
                beyond_only += bool(failed) and all(clause_of(c).scope == BEYOND_COURSE_MARK for c in failed)
        shares.append(BrokenShare(invariant, broken, checked, beyond_only))
    order = {invariant: rank for rank, invariant in enumerate(invariants)}
    return sorted(shares, key=lambda s: (-s.share, -s.broken, order[s.invariant]))


def points_histogram(scores: list[Score]) -> list[Bar]:
    """HISTOGRAM_BINS bars over [0, the largest maximum]; the last bin includes its upper edge."""
    top = max((score.maximum for score in scores), default=0.0)
    if top <= 0:
        return [Bar("0", float(len(scores)))]
    width = top / HISTOGRAM_BINS
    counts = [0] * HISTOGRAM_BINS
    for score in scores:
        counts[min(int(score.total / width), HISTOGRAM_BINS - 1)] += 1
    return [
        Bar(f"{format_points(width * i)}-{format_points(width * (i + 1))}", float(count))
        for i, count in enumerate(counts)
    ]


def render_points_plot(scores: list[Score]) -> str:
    return bar_chart(
        points_histogram(scores),
        title="Points per submission",
        subtitle=f"{len(scores)} submissions; bins of equal width up to the maximum",
        value_label="submissions",
        category_label="total points",
        value_format=lambda v: f"{v:g}",
        integer_values=True,
    )


def render_broken_plot(shares: list[BrokenShare]) -> str:
    return bar_chart(
        [Bar(share.invariant, share.share) for share in shares],
        title="Share of finished submissions that broke each invariant",
        subtitle="most-broken first; of the submissions that ran a check of it",
        value_label="share of submissions",
        horizontal=True,
        value_max=1.0,
        value_format=lambda v: f"{100 * v:.0f}%",
    )


def render_overview(scores: list[Score], documents: list[dict[str, Any]], invariants: list[str]) -> list[str]:
    """grades.md's opening section (Markdown lines); the plots are written beside it by the caller."""
    shares = broken_shares(documents, invariants)
    unfinished = [score for score in scores if score.verdict != "ok"]
    totals = sorted(score.total for score in scores)
    median = (totals[(len(totals) - 1) // 2] + totals[len(totals) // 2]) / 2 if totals else 0.0
    top = max((score.maximum for score in scores), default=0.0)
    lines = [
        "## Class overview",
        "",
        f"{len(scores)} submissions; median total {format_points(median)} of {format_points(top)}, "
        f"{sum(1 for t in totals if t == top and top > 0)} with full points, {sum(1 for t in totals if t == 0)} with none.",
        "",
        f"![points per submission]({POINTS_PLOT_FILE})",
        "",
    ]
    if unfinished:
        verdicts = ", ".join(f"{score.name} ({score.verdict})" for score in unfinished)
        runs = "run did not finish and is" if len(unfinished) == 1 else "runs did not finish and are"
        lines += [f"{len(unfinished)} {runs} left out of the table below: {verdicts}.", ""]
    lines += [
        "Invariants by the share of finished submissions that broke them (failed a check on the public or the "
        "hidden inputs), most-broken first:",
        "",
        "| invariant | broke it | of them, only beyond the course | ran its checks | share |",
        "|---|---:|---:|---:|---:|",
        *(f"| {s.invariant} | {s.broken} | {s.beyond_only} | {s.checked} | {100 * s.share:.0f}% |" for s in shares),
        "",
    ]
    if shares:
        lines += [f"![share of submissions that broke each invariant]({BROKEN_PLOT_FILE})", ""]
    return lines


def overview_plots(scores: list[Score], documents: list[dict[str, Any]], invariants: list[str]) -> dict[str, str]:
    """The overview's SVG files by name (the broken-invariant plot only when some invariant was graded)."""
    plots = {POINTS_PLOT_FILE: render_points_plot(scores)}
    shares = broken_shares(documents, invariants)
    if shares:
        plots[BROKEN_PLOT_FILE] = render_broken_plot(shares)
    return plots
