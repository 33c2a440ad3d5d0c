"""grades.md's class overview: the points histogram and the share of submissions that broke each invariant."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from pathlib import Path

from pagecheck.grading.class_overview import (
    BROKEN_PLOT_FILE,
    HISTOGRAM_BINS,
    POINTS_PLOT_FILE,
    broken_shares,
    points_histogram,
)
from pagecheck.grading.outputs import write_outputs
from pagecheck.grading.results_store import result_path, write_json_atomic
from pagecheck.grading.rubric import load_rubric
from pagecheck.grading.scoreboard import graded_invariants, scores_for
from tests.grading_results import result_document

RUBRIC = load_rubric(Path(__file__).resolve().parent / "grading_fixtures" / "rubric.toml")
SVG = "{http://www.w3.org/2000/svg}"
GRADED = ("release_once", "lazy_tail", "head_dims", "inputs_unchanged")


def outcomes(**broken: list[str]) -> dict[str, list[str]]:
    """Every graded invariant passing its two checks, except those given."""
    return {invariant: broken.get(invariant, ["pass", "pass"]) for invariant in GRADED}


DOCUMENTS = [
    result_document("all", outcomes()),
    result_document("heads", outcomes(head_dims=["fail", "pass"])),
    result_document("heads_tail", outcomes(head_dims=["pass", "error"], lazy_tail=["fail", "fail"])),
    result_document("skipped", outcomes(head_dims=["fail", "pass"], inputs_unchanged=["skip", "skip"])),
    result_document("crashed", outcomes(), verdict="crashed"),
]


def test_shares_count_finished_submissions_that_ran_a_check_most_broken_first() -> None:
    shares = broken_shares(DOCUMENTS, list(GRADED))
    assert [(s.invariant, s.broken, s.checked) for s in shares] == [
        ("head_dims", 3, 4),
        ("lazy_tail", 1, 4),
        ("release_once", 0, 4),  # ties keep the order given
        ("inputs_unchanged", 0, 3),  # all skipped: not counted as checked
    ]
    assert shares[0].share == 0.75
    # head_dims has no course check; heads_tail broke lazy_tail's course checks.
    assert [(s.invariant, s.beyond_only) for s in shares[:2]] == [("head_dims", 3), ("lazy_tail", 0)]


def test_a_submission_that_broke_only_checks_beyond_the_course_is_counted_apart() -> None:
    document = result_document("strict", outcomes(), beyond={"lazy_tail": ["fail"]})
    [share] = [s for s in broken_shares([document], list(GRADED)) if s.invariant == "lazy_tail"]
    assert (share.broken, share.beyond_only, share.checked) == (1, 1, 1)


def test_the_histogram_counts_every_submission_once_with_full_points_in_the_last_bin() -> None:
    scores = scores_for(DOCUMENTS, RUBRIC)
    bars = points_histogram(scores)
    assert len(bars) == HISTOGRAM_BINS
    assert sum(bar.value for bar in bars) == len(scores)
    full = sum(1 for score in scores if score.total == score.maximum)
    assert full >= 1 and bars[-1].value == full
    assert bars[0].value == sum(1 for score in scores if score.total < score.maximum / HISTOGRAM_BINS)
    assert bars[0].label.startswith("0-") and bars[-1].label.endswith(f"-{score_max(scores)}")


def score_max(scores: list) -> str:
    return f"{max(score.maximum for score in scores):g}"


def test_grades_md_opens_with_the_overview_and_both_plots_parse(tmp_path: Path) -> None:
    for document in DOCUMENTS:
        write_json_atomic(result_path(tmp_path, document["name"]), document)
    write_outputs(tmp_path, RUBRIC)
    page = (tmp_path / "grades.md").read_text()
    assert page.index("## Class overview") < page.index("## Submissions") < page.index("| submission |")
    assert f"![points per submission]({POINTS_PLOT_FILE})" in page and BROKEN_PLOT_FILE in page
    assert "| head_dims | 3 | 3 | 4 | 75% |" in page
    assert "crashed (crashed (SIGSEGV))" in page
    points = ElementTree.parse(tmp_path / POINTS_PLOT_FILE).getroot()
    bars = [e for e in points.iter() if e.get("class") == "bar"]
    assert len(bars) == HISTOGRAM_BINS
    assert sum(int(e.find(f"{SVG}title").text.split(": ")[1]) for e in bars) == len(DOCUMENTS)
    broken = ElementTree.parse(tmp_path / BROKEN_PLOT_FILE).getroot()
    shares = [e for e in broken.iter() if e.get("class") == "bar"]
    assert [e.find(f"{SVG}title").text for e in shares] == [
        "head_dims: 75%", "lazy_tail: 25%", "release_once: 0%", "inputs_unchanged: 0%"]  # fmt: skip
    widths = [float(e.get("width")) for e in shares]
    assert widths[0] == 3 * widths[1] and widths[2] == widths[3] == 0
    # The CSV stays one plain row per submission.
    csv_lines = (tmp_path / "grades.csv").read_text().splitlines()
    assert csv_lines[0].startswith("submission,verdict,") and len(csv_lines) == len(DOCUMENTS) + 1


def test_the_overview_is_the_same_bytes_for_the_same_results(tmp_path: Path) -> None:
    for out in (tmp_path / "a", tmp_path / "b"):
        for document in reversed(DOCUMENTS) if out.name == "b" else DOCUMENTS:
            write_json_atomic(result_path(out, document["name"]), document)
        write_outputs(out, RUBRIC)
    for name in ("grades.md", POINTS_PLOT_FILE, BROKEN_PLOT_FILE):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert graded_invariants(DOCUMENTS) == list(GRADED)
