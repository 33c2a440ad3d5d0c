"""The rubric file and how results are scored with it: course clauses and clauses beyond the course apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pagecheck.invariants.course import BEYOND_COURSE_MARK, CLAUSE_SCOPES, COURSE_MARK
from pagecheck.grading.rubric import FINDING_KINDS, Clause, load_rubric, parse_rubric
from pagecheck.grading.scoreboard import protections_line, render_csv, render_markdown, score_result, scores_for
from tests.grading_results import result_document


def course(invariant: str) -> Clause:
    return Clause(invariant, COURSE_MARK)


def beyond(invariant: str) -> Clause:
    return Clause(invariant, BEYOND_COURSE_MARK)


def test_default_rubric_prices_every_clause_of_every_invariant() -> None:
    rubric = load_rubric()
    assert set(rubric.points) == {i for i, scopes in CLAUSE_SCOPES.items() if COURSE_MARK in scopes}
    assert set(rubric.beyond) == {i for i, scopes in CLAUSE_SCOPES.items() if BEYOND_COURSE_MARK in scopes}
    assert all(points > 0 for points in [*rubric.points.values(), *rubric.beyond.values()])
    rubric.check_prices(list(CLAUSE_SCOPES))


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ({"points": {"no_such_invariant": 3}}, "no_such_invariant"),
        ({"points": {"context_len": -1}}, "points.context_len"),
        ({"beyond_course": {"context_len": "5"}}, "beyond_course.context_len"),
        ({"points": {"head_dims": 5}}, "points.head_dims: no check of head_dims mirrors a course test"),
        ({"points": {"empty_rows": 5}}, "points.empty_rows: no check of empty_rows mirrors a course test"),
        ({"scoring": "curved"}, "scoring"),
        ({"anticheat": {"sdpa_call": "ignore"}}, "anticheat.sdpa_call"),
        ({"requires": {"inputs_unchanged": ["nothing"]}}, "requires.inputs_unchanged"),
        ({"requires": {"context_len": ["head_dims"]}}, "requires.context_len names .'head_dims'., whose checks all"),
        ({"bonus": 1}, "bonus"),
        # NaN or infinite points passed, and the scoreboard failed after every submission was graded.
        ({"points": {"context_len": float("nan")}}, "points.context_len=nan must be a number of points from 0 to"),
        ({"beyond_course": {"context_len": float("inf")}}, "beyond_course.context_len=inf must be a number"),
        ({"anticheat": 5}, "anticheat. must be a table"),
        ({"requires": 3}, "requires. must be a table"),
    ],
)
def test_invalid_rubric_names_the_field(document: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        parse_rubric(document, "test.toml")


def test_a_price_beyond_the_course_for_an_invariant_with_no_such_check_names_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No invariant is course-only today; page_storage stands in for one.
    monkeypatch.setitem(CLAUSE_SCOPES, "page_storage", (COURSE_MARK,))
    with pytest.raises(ValueError, match="beyond_course.page_storage: no check of page_storage goes beyond"):
        parse_rubric({"beyond_course": {"page_storage": 5}}, "test.toml")


def test_unreadable_rubric_is_a_value_error(tmp_path: Path) -> None:
    path = tmp_path / "rubric.toml"
    path.write_text("points = [")
    with pytest.raises(ValueError, match="rubric.toml"):
        load_rubric(path)


def test_a_graded_clause_without_points_is_refused_before_grading() -> None:
    rubric = parse_rubric({"points": {"context_len": 10}}, "t.toml")
    with pytest.raises(ValueError, match=r"invariant='context_len' under \[beyond_course\]"):
        rubric.check_prices(["context_len"])
    with pytest.raises(ValueError, match=r"invariant='lazy_tail' under \[points\]"):
        rubric.check_prices(["lazy_tail"])


def _rubric(**extra: object):
    """context_len 10 and lazy_tail 4 for their course clauses; beyond the course, inputs_unchanged 2 and the
    other two 0 (their checks beyond the course are left out of these documents unless given)."""
    beyond_points = {"context_len": 0, "lazy_tail": 0, "inputs_unchanged": 2, **extra.pop("beyond_course", {})}
    document = {"points": {"context_len": 10, "lazy_tail": 4}, "beyond_course": beyond_points, **extra}
    return parse_rubric(document, "t.toml")


def course_points(score) -> dict[Clause, float | None]:
    return {clause: earned for clause, earned in score.points.items() if clause.scope == COURSE_MARK}


def test_all_or_nothing_needs_every_check() -> None:
    document = result_document("s", {"context_len": ["pass", "fail"], "lazy_tail": ["pass", "pass"]})
    score = score_result(document, _rubric())
    assert course_points(score) == {course("context_len"): 0.0, course("lazy_tail"): 4.0}
    assert (score.total, score.maximum) == (4.0, 14.0)


def test_fraction_scores_each_check() -> None:
    document = result_document("s", {"context_len": ["pass", "fail"], "lazy_tail": ["pass", "skip"]})
    score = score_result(document, _rubric(scoring="fraction"))
    assert course_points(score) == {course("context_len"): 5.0, course("lazy_tail"): 2.0}


def test_a_check_beyond_the_course_never_costs_a_course_point() -> None:
    """An implementation the course accepts keeps every course point, whatever the stricter checks say."""
    rubric = _rubric(beyond_course={"context_len": 5})
    document = result_document("s", {"context_len": ["pass", "pass"]}, beyond={"context_len": ["fail"],
                                                                               "inputs_unchanged": ["fail"]})
    score = score_result(document, rubric)
    assert score.points == {course("context_len"): 10.0, beyond("context_len"): 0.0, beyond("inputs_unchanged"): 0.0}
    assert (score.total, score.maximum, score.beyond_total, score.beyond_maximum) == (10.0, 10.0, 0.0, 7.0)
    fixed = result_document("t", {"context_len": ["pass", "pass"]}, beyond={"context_len": ["pass"],
                                                                            "inputs_unchanged": ["pass"]})
    assert (score_result(fixed, rubric).total, score_result(fixed, rubric).beyond_total) == (10.0, 7.0)
    header, row = render_csv([score], ["context_len", "inputs_unchanged"]).splitlines()
    assert header == ("submission,verdict,context_len,total,max,context_len (beyond the course),"
                      "inputs_unchanged (beyond the course),beyond,beyond_max,flags")
    assert row == "s,ok,10,10,10,0,0,0,7,"


@pytest.mark.parametrize("scoring", ["all-or-nothing", "fraction"])
def test_a_declined_optional_dtype_costs_no_points(scoring: str) -> None:
    document = result_document("s", {"context_len": ["pass", "pass", "skip"], "lazy_tail": ["pass", "skip"]})
    declined = "unsupported dtype float16: the subject declines it (ValueError: supports float32 or bfloat16)"
    document["checks"][2]["message"] = declined
    document["checks"][4]["message"] = "subject s has no BatchingKvCache: not defined in s"
    score = score_result(document, _rubric(scoring=scoring))
    assert course_points(score) == {course("context_len"): 10.0, course("lazy_tail"): 2.0 if scoring == "fraction" else 0.0}
    document["checks"] = [c for c in document["checks"] if c["invariant"] == "context_len"][2:]
    assert score_result(document, _rubric(scoring=scoring)).points[course("context_len")] is None  # only declined


def test_unfinished_run_scores_nothing() -> None:
    document = result_document("s", {"context_len": ["pass"], "lazy_tail": ["pass"]}, verdict="crashed")
    score = score_result(document, _rubric(beyond_course={"context_len": 3, "lazy_tail": 1}))
    assert (score.total, score.beyond_total, score.maximum, score.beyond_maximum) == (0.0, 0.0, 14.0, 4.0)
    assert score.verdict == "crashed (SIGSEGV)"


def test_requirement_withholds_points_until_it_is_met(monkeypatch: pytest.MonkeyPatch) -> None:
    # An invariant whose checks all mirror the course (none does today; page_storage stands in for one):
    # inputs_unchanged's clause beyond the course waits for its course clause.
    monkeypatch.setitem(CLAUSE_SCOPES, "page_storage", (COURSE_MARK,))
    rubric = _rubric(requires={"inputs_unchanged": ["page_storage"]}, points={"page_storage": 10})
    broken = result_document("a", {"page_storage": ["fail"]}, beyond={"inputs_unchanged": ["pass"]})
    working = result_document("b", {"page_storage": ["pass"]}, beyond={"inputs_unchanged": ["pass"]})
    assert score_result(broken, rubric).points[beyond("inputs_unchanged")] == 0.0
    assert score_result(working, rubric).points[beyond("inputs_unchanged")] == 2.0
    alone = result_document("c", {}, beyond={"inputs_unchanged": ["pass"]})  # the requirement was not graded
    assert score_result(alone, rubric).points[beyond("inputs_unchanged")] == 2.0


def test_a_requirement_waits_for_the_same_clause() -> None:
    # lazy_tail's course clause waits for context_len's course clause only; its clause beyond the course
    # waits for context_len's clause beyond the course.
    rubric = _rubric(requires={"lazy_tail": ["context_len"]}, beyond_course={"context_len": 3, "lazy_tail": 1})
    document = result_document("a", {"context_len": ["pass"], "lazy_tail": ["pass"]},
                               beyond={"context_len": ["fail"], "lazy_tail": ["pass"]})  # fmt: skip
    score = score_result(document, rubric)
    assert score.points[course("lazy_tail")] == 4.0
    assert score.points[beyond("lazy_tail")] == 0.0


def test_anticheat_zero_and_flag() -> None:
    document = result_document("s", {"lazy_tail": ["pass"]}, findings=("dense_gather",))
    assert score_result(document, _rubric()).total == 0.0
    flagged = score_result(document, _rubric(anticheat={"dense_gather": "flag"}))
    assert (flagged.total, flagged.flags) == (4.0, ("dense_gather",))


def test_a_finding_beyond_the_course_costs_only_the_total_beyond_it() -> None:
    rubric = _rubric()
    document = result_document("s", {"lazy_tail": ["pass"]}, beyond={"inputs_unchanged": ["pass"]},
                               findings=("gather_trap",))  # fmt: skip
    score = score_result(document, rubric)
    assert (score.total, score.beyond_total, score.flags) == (4.0, 0.0, ("gather_trap",))
    both = result_document("t", {"lazy_tail": ["pass"]}, beyond={"inputs_unchanged": ["pass"]},
                           findings=("gather_trap", "sdpa_call"))  # fmt: skip
    assert (score_result(both, rubric).total, score_result(both, rubric).beyond_total) == (0.0, 0.0)
    # SDPA reached where the course's source check does not read (at run time, a helper): beyond the course.
    trapped = result_document("u", {"lazy_tail": ["pass"]}, beyond={"inputs_unchanged": ["pass"]},
                              findings=("sdpa_trap", "sdpa_route", "dense_route"))  # fmt: skip
    assert (score_result(trapped, rubric).total, score_result(trapped, rubric).beyond_total) == (4.0, 0.0)


def test_invariant_without_checks_is_marked_not_checked() -> None:
    document = result_document("s", {"lazy_tail": ["pass"]})
    document["settings"]["invariants"] = ["context_len", "lazy_tail"]
    score = score_result(document, _rubric(beyond_course={"context_len": 1, "lazy_tail": 1}))
    assert score.points[course("context_len")] is None
    assert render_csv([score], ["context_len", "lazy_tail"]).splitlines()[1].split(",")[2] == "-"


def test_scoreboard_is_sorted_and_reproducible() -> None:
    rubric = _rubric(beyond_course={"lazy_tail": 1})
    documents = [result_document(n, {"lazy_tail": [o]}, beyond={"lazy_tail": ["pass"]})
                 for n, o in [("zed", "pass"), ("amy", "fail")]]  # fmt: skip
    scores = scores_for(documents, rubric)
    assert [s.name for s in scores] == ["amy", "zed"]
    assert render_markdown(scores, ["lazy_tail"], rubric) == render_markdown(scores_for(documents[::-1], rubric), ["lazy_tail"], rubric)
    assert render_csv(scores, ["lazy_tail"]).splitlines() == [
        "submission,verdict,lazy_tail,total,max,lazy_tail (beyond the course),beyond,beyond_max,flags",
        "amy,ok,0,0,4,1,1,1,", "zed,ok,4,4,4,1,1,1,",
    ]
    markdown = render_markdown(scores, ["lazy_tail"], rubric)
    assert "| amy | ok | 0 | 0 | 4 |  |" in markdown and "Beyond the course:" in markdown
    assert "| amy | ok | 1 | 1 | 1 |  |" in markdown


def test_every_prerequisite_must_be_met() -> None:
    # lazy_tail's course clause needs both; release_once is met and page_storage is not, so it earns nothing.
    rubric = _rubric(requires={"lazy_tail": ["release_once", "page_storage"]},
                     points={"lazy_tail": 4, "release_once": 10, "page_storage": 5},
                     beyond_course={"release_once": 0, "page_storage": 0})  # fmt: skip
    one_missing = result_document("a", {"release_once": ["pass"], "page_storage": ["fail"], "lazy_tail": ["pass"]})
    score = score_result(one_missing, rubric)
    assert course_points(score) == {course("release_once"): 10.0, course("page_storage"): 0.0, course("lazy_tail"): 0.0}
    assert score.total == 10.0
    both_met = result_document("b", {"release_once": ["pass"], "page_storage": ["pass"], "lazy_tail": ["pass"]})
    assert score_result(both_met, rubric).total == 19.0


def test_flag_and_zeroing_finding_together() -> None:
    rubric = _rubric(anticheat={"tamper": "flag", "gather_trap": "zero"})
    document = result_document("s", {"context_len": ["pass"], "lazy_tail": ["pass"]}, findings=("tamper", "gather_trap"))
    score = score_result(document, rubric)
    assert (score.total, score.flags) == (0.0, ("gather_trap", "tamper"))
    flagged_only = result_document("t", {"context_len": ["pass"], "lazy_tail": ["pass"]}, findings=("tamper",))
    assert score_result(flagged_only, rubric).total == 14.0
    assert render_csv([score], ["context_len", "lazy_tail"]).splitlines()[1] == "s,ok,10,4,0,14,-,-,0,0,gather_trap tamper"


def test_default_rubric_zeroes_the_course_rules_and_only_the_beyond_total_for_the_rest() -> None:
    rubric = load_rubric()
    assert {kind: rubric.anticheat[kind] for kind in rubric.anticheat} == {
        "sdpa_call": "zero", "dense_gather": "zero", "project_import": "zero", "sdpa_route": "zero-beyond",
        "dense_route": "zero-beyond", "sdpa_trap": "zero-beyond", "page_join": "zero-beyond",
        "gather_trap": "zero-beyond", "tamper": "flag", "unscanned": "flag", "entry_unresolved": "flag",
    }  # fmt: skip
    # A rubric that does not name unscanned flags it: the grader's blind spot costs a student nothing.
    assert parse_rubric({"points": {"context_len": 10}}, "t").anticheat["unscanned"] == "flag"


def test_default_rubric_counts_rejection_only_next_to_a_working_attention() -> None:
    # An attention that raises ValueError on every call, valid inputs or not, passes every rejection check
    # (a correct pool and cache beside it earned rejection's 5 + 5 with no attention at all): the default
    # rubric counts rejection only where context_len, attention over a cache, holds too.
    rubric = load_rubric()
    assert rubric.requires["rejection"] == ("context_len",)
    rejects_all = result_document("r", {"context_len": ["fail"], "rejection": ["pass", "pass"]},
                                  beyond={"context_len": ["fail"], "rejection": ["pass"]})  # fmt: skip
    score = score_result(rejects_all, rubric)
    assert score.points[course("rejection")] == 0.0 and score.points[beyond("rejection")] == 0.0
    working = result_document("w", {"context_len": ["pass"], "rejection": ["pass", "pass"]},
                              beyond={"context_len": ["pass"], "rejection": ["pass"]})  # fmt: skip
    score = score_result(working, rubric)
    assert score.points[course("rejection")] == rubric.points["rejection"]
    assert score.points[beyond("rejection")] == rubric.beyond["rejection"]


def test_grades_list_the_protections_that_were_off() -> None:
    on = {"pid_namespace": "on", "landlock": "on (ABI 7: filesystem, TCP, signals)"}
    lesser = {"pid_namespace": "off: unshare refused (EPERM)", "landlock": "off: the kernel offers none"}
    documents = [result_document("a", {"lazy_tail": ["pass"]}), result_document("b", {"lazy_tail": ["pass"]})]
    documents[0]["protections"], documents[1]["protections"] = on, lesser
    line = protections_line(documents)
    assert line == "Sandbox protections OFF: landlock (the kernel offers none); pid_namespace (unshare refused (EPERM))."
    assert protections_line(documents[:1]) == "Sandbox: every protection was on."
    rubric = _rubric(beyond_course={"lazy_tail": 1})
    assert line in render_markdown(scores_for(documents, rubric), ["lazy_tail"], rubric, sandbox=line)


def test_the_results_schema_knows_every_finding_kind() -> None:
    schema = json.loads((Path(__file__).resolve().parent.parent / "reports" / "schema" / "grade.schema.json").read_text())
    kinds = schema["properties"]["findings"]["items"]["properties"]["kind"]["enum"]
    assert sorted(kinds) == sorted(FINDING_KINDS)


def test_a_rubric_with_a_byte_order_mark_and_negative_zero_reads_as_written(tmp_path: Path) -> None:
    """A rubric saved with a BOM was 'Invalid statement (at line 1, column 1)'; points of -0.0 showed as -0."""
    path = tmp_path / "rubric.toml"
    path.write_text("\ufeff[points]\ncontext_len = -0.0\nrelease_once = 10\n", encoding="utf-8")
    rubric = load_rubric(path)
    assert rubric.points["release_once"] == 10 and str(rubric.points["context_len"]) == "0.0"
