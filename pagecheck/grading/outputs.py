"""Writing what a grading run shows from the results under OUT: grades.md (opening with the class overview
and its two plots), grades.csv, feedback/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pagecheck.grading.class_overview import overview_plots, render_overview
from pagecheck.grading.feedback import render_feedback
from pagecheck.grading.results_store import SCOREBOARD, load_all_results, write_text_atomic
from pagecheck.grading.rubric import Rubric
from pagecheck.grading.scoreboard import graded_invariants, protections_line, render_csv, render_markdown, scores_for

FEEDBACK_DIR = "feedback"


def write_outputs(out: Path, rubric: Rubric) -> list[dict[str, Any]]:
    """Render the scoreboard and every feedback file from OUT/results; return the results used."""
    documents = load_all_results(out)
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
