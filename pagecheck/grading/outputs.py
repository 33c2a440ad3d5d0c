"""Writing what a grading run shows from the results under OUT: grades.md (opening with the class overview
and its two plots), grades.csv, feedback/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pagecheck.grading.class_overview import BROKEN_PLOT_FILE, POINTS_PLOT_FILE, overview_plots, render_overview
from pagecheck.grading.feedback import render_feedback
from pagecheck.grading.results_store import RESULTS_DIR, SCOREBOARD, load_all_results, write_text_atomic
from pagecheck.grading.rubric import Rubric
from pagecheck.grading.scoreboard import graded_invariants, protections_line, render_csv, render_markdown, scores_for

FEEDBACK_DIR = "feedback"


def out_problem(out: Path, names: list[str]) -> str | None:
    """Why OUT cannot take a grading run's files (checked before any submission is graded, so that none is lost to
    a folder where a file goes, or a file where a folder goes), or None."""
    folders = [out / RESULTS_DIR, out / FEEDBACK_DIR]
    files = [out / name for name in ("grades.csv", SCOREBOARD, POINTS_PLOT_FILE, BROKEN_PLOT_FILE)]
    files += [out / RESULTS_DIR / f"{name}.json" for name in names] + [out / FEEDBACK_DIR / f"{name}.md" for name in names]
    blocked = [path for path in folders if path.exists() and not path.is_dir()]
    blocked += [path for path in files if path.exists() and not path.is_file()]
    if not blocked:
        return None
    shown = ", ".join(str(path.relative_to(out)) for path in blocked)
    return f"--out={str(out)!r} holds {shown} as something other than the file or folder a grading run writes there"


def write_outputs(out: Path, rubric: Rubric, regrading: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """Render the scoreboard and every feedback file from OUT/results; return the results used. A damaged result
    of a submission in `regrading` (graded in this run, so an interrupted one) is left out."""
    documents = load_all_results(out, regrading)
    invariants = graded_invariants(documents)
    scores = scores_for(documents, rubric)
    write_text_atomic(out / "grades.csv", render_csv(scores, invariants))
    for name, svg in overview_plots(scores, documents, invariants).items():
        write_text_atomic(out / name, svg)
    overview = render_overview(scores, documents, invariants)
    write_text_atomic(out / SCOREBOARD, render_markdown(scores, invariants, rubric, overview, protections_line(documents)))
    for document in documents:
        write_text_atomic(out / FEEDBACK_DIR / f"{document['name']}.md", render_feedback(document, rubric))
    return documents
