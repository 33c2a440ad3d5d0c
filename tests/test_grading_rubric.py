"""The rubric file and how results are scored with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from pagecheck.invariants.catalog import INVARIANTS
from pagecheck.grading.rubric import load_rubric, parse_rubric
from pagecheck.grading.scoreboard import protections_line, render_csv, render_markdown, score_result, scores_for
from tests.grading_results import result_document


def test_default_rubric_prices_every_invariant() -> None:
    rubric = load_rubric()
    assert set(rubric.points) == set(INVARIANTS)
    assert all(points > 0 for points in rubric.points.values())


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ({"points": {"no_such_invariant": 3}}, "no_such_invariant"),
        ({"points": {"context_len": -1}}, "points.context_len"),
        ({"scoring": "curved"}, "scoring"),
        ({"anticheat": {"sdpa_call": "ignore"}}, "anticheat.sdpa_call"),
        ({"requires": {"inputs_unchanged": ["nothing"]}}, "requires.inputs_unchanged"),
        ({"bonus": 1}, "bonus"),
    ],
)
def test_invalid_rubric_names_the_field(document: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        parse_rubric(document, "test.toml")


def test_unreadable_rubric_is_a_value_error(tmp_path: Path) -> None:
    path = tmp_path / "rubric.toml"
    path.write_text("points = [")
    with pytest.raises(ValueError, match="rubric.toml"):
        load_rubric(path)


def _rubric(**extra: object):
    return parse_rubric({"points": {"context_len": 10, "lazy_tail": 4, "inputs_unchanged": 2}, **extra}, "t.toml")


def test_all_or_nothing_needs_every_check() -> None:
    document = result_document("s", {"context_len": ["pass", "fail"], "lazy_tail": ["pass", "pass"]})
    score = score_result(document, _rubric())
    assert score.points == {"context_len": 0.0, "lazy_tail": 4.0}
    assert (score.total, score.maximum) == (4.0, 14.0)


def test_fraction_scores_each_check() -> None:
    document = result_document("s", {"context_len": ["pass", "fail"], "lazy_tail": ["pass", "skip"]})
    score = score_result(document, _rubric(scoring="fraction"))
    assert score.points == {"context_len": 5.0, "lazy_tail": 2.0}


@pytest.mark.parametrize("scoring", ["all-or-nothing", "fraction"])
def test_a_declined_optional_dtype_costs_no_points(scoring: str) -> None:
    document = result_document("s", {"context_len": ["pass", "pass", "skip"], "lazy_tail": ["pass", "skip"]})
    declined = "unsupported dtype float16: the subject declines it (ValueError: supports float32 or bfloat16)"
    document["checks"][2]["message"] = declined
    document["checks"][4]["message"] = "subject s has no BatchingKvCache: not defined in s"
    score = score_result(document, _rubric(scoring=scoring))
    assert score.points == {"context_len": 10.0, "lazy_tail": 2.0 if scoring == "fraction" else 0.0}
    document["checks"] = [c for c in document["checks"] if c["invariant"] == "context_len"][2:]
    assert score_result(document, _rubric(scoring=scoring)).points["context_len"] is None  # only declined checks


@pytest.mark.parametrize("scoring", ["all-or-nothing", "fraction"])
def test_a_check_the_sandbox_cannot_carry_costs_no_points(scoring: str) -> None:
    document = result_document("s", {"rejection": ["pass", "skip"], "lazy_tail": ["pass", "skip"]})
    document["checks"][1]["message"] = (
        "needs the subject in this process: the failure is injected into the pool's write_page_slice, "
        "and this subject runs in a sandboxed worker"
    )
    document["checks"][3]["message"] = "needs the subject in process"  # not the fixed start: a plain skip
    rubric = parse_rubric({"points": {"rejection": 6, "lazy_tail": 4}, "scoring": scoring}, "t.toml")
    assert score_result(document, rubric).points == {"rejection": 6.0, "lazy_tail": 2.0 if scoring == "fraction" else 0.0}


def test_unfinished_run_scores_nothing() -> None:
    document = result_document("s", {"context_len": ["pass"], "lazy_tail": ["pass"]}, verdict="crashed")
    score = score_result(document, _rubric())
    assert score.total == 0.0
    assert score.verdict == "crashed (SIGSEGV)"


def test_requirement_withholds_points_until_it_is_met() -> None:
    rubric = _rubric(requires={"inputs_unchanged": ["context_len"]})
    broken = result_document("a", {"context_len": ["fail"], "inputs_unchanged": ["pass"]})
    working = result_document("b", {"context_len": ["pass"], "inputs_unchanged": ["pass"]})
    assert score_result(broken, rubric).points["inputs_unchanged"] == 0.0
    assert score_result(working, rubric).points["inputs_unchanged"] == 2.0
    alone = result_document("c", {"inputs_unchanged": ["pass"]})  # the requirement was not graded
    assert score_result(alone, rubric).points["inputs_unchanged"] == 2.0


def test_anticheat_zero_and_flag() -> None:
    document = result_document("s", {"lazy_tail": ["pass"]}, findings=("dense_gather",))
    assert score_result(document, _rubric()).total == 0.0
    flagged = score_result(document, _rubric(anticheat={"dense_gather": "flag"}))
    assert (flagged.total, flagged.flags) == (4.0, ("dense_gather",))


def test_invariant_without_checks_is_marked_not_checked() -> None:
    document = result_document("s", {"lazy_tail": ["pass"]})
    document["settings"]["invariants"] = ["context_len", "lazy_tail"]
    score = score_result(document, _rubric())
    assert score.points["context_len"] is None
    assert render_csv([score], ["context_len", "lazy_tail"]).splitlines()[1].split(",")[2] == "-"


def test_scoreboard_is_sorted_and_reproducible() -> None:
    rubric = _rubric()
    documents = [result_document(n, {"lazy_tail": [o]}) for n, o in [("zed", "pass"), ("amy", "fail")]]
    scores = scores_for(documents, rubric)
    assert [s.name for s in scores] == ["amy", "zed"]
    assert render_markdown(scores, ["lazy_tail"], rubric) == render_markdown(scores_for(documents[::-1], rubric), ["lazy_tail"], rubric)
    assert render_csv(scores, ["lazy_tail"]).splitlines() == [
        "submission,verdict,lazy_tail,total,max,flags", "amy,ok,0,0,4,", "zed,ok,4,4,4,"
    ]


def test_every_prerequisite_must_be_met() -> None:
    # inputs_unchanged needs both; context_len is met and lazy_tail is not, so it earns nothing.
    rubric = _rubric(requires={"inputs_unchanged": ["context_len", "lazy_tail"]})
    one_missing = result_document("a", {"context_len": ["pass"], "lazy_tail": ["fail"], "inputs_unchanged": ["pass"]})
    score = score_result(one_missing, rubric)
    assert score.points == {"context_len": 10.0, "lazy_tail": 0.0, "inputs_unchanged": 0.0}
    assert score.total == 10.0
    both_met = result_document("b", {"context_len": ["pass"], "lazy_tail": ["pass"], "inputs_unchanged": ["pass"]})
    assert score_result(both_met, rubric).total == 16.0


def test_flag_and_zeroing_finding_together() -> None:
    rubric = _rubric(anticheat={"tamper": "flag"})
    document = result_document("s", {"context_len": ["pass"], "lazy_tail": ["pass"]}, findings=("tamper", "gather_trap"))
    score = score_result(document, rubric)
    assert (score.total, score.flags) == (0.0, ("gather_trap", "tamper"))
    flagged_only = result_document("t", {"context_len": ["pass"], "lazy_tail": ["pass"]}, findings=("tamper",))
    assert score_result(flagged_only, rubric).total == 14.0
    assert render_csv([score], ["context_len", "lazy_tail"]).splitlines()[1] == "s,ok,10,4,0,14,gather_trap tamper"


def test_default_rubric_zeroes_the_runtime_tripwires_and_flags_tampering() -> None:
    rubric = load_rubric()
    assert [rubric.anticheat[kind] for kind in ("sdpa_trap", "gather_trap", "project_import", "tamper")] == \
        ["zero", "zero", "zero", "flag"]


def test_grades_list_the_protections_that_were_off() -> None:
    on = {"pid_namespace": "on", "landlock": "on (ABI 7: filesystem, TCP, signals)"}
    lesser = {"pid_namespace": "off: unshare refused (EPERM)", "landlock": "off: the kernel offers none"}
    documents = [result_document("a", {"lazy_tail": ["pass"]}), result_document("b", {"lazy_tail": ["pass"]})]
    documents[0]["protections"], documents[1]["protections"] = on, lesser
    line = protections_line(documents)
    assert line == "Sandbox protections OFF: landlock (the kernel offers none); pid_namespace (unshare refused (EPERM))."
    assert protections_line(documents[:1]) == "Sandbox: every protection was on."
    rubric = _rubric()
    assert line in render_markdown(scores_for(documents, rubric), ["lazy_tail"], rubric, sandbox=line)
