"""What the student sees: failures with reproduction commands, and never the hidden seed."""

from __future__ import annotations

import shlex
import sys

from pagecheck.grading.build import BuildOutcome
from pagecheck.grading.child_plugin import PLUGIN
from pagecheck.grading.feedback import HIDDEN_MASK, render_feedback
from pagecheck.grading.grade_one import combine_checks, submission_verdict
from pagecheck.grading.rubric import parse_rubric
from pagecheck.grading.sandbox import ChildExit
from pagecheck.grading.seeds import PUBLIC_SEED, SuitePassSeed, fingerprint, hidden_seed
from pagecheck.grading.suite_pass import PassOutcome
from pagecheck.grading.verdicts import Verdict
from tests.grading_results import result_document

RUBRIC = parse_rubric({"points": {"context_len": 10, "lazy_tail": 4, "dtypes": 2},
                       "beyond_course": {"context_len": 3, "lazy_tail": 1, "dtypes": 1}}, "t.toml")  # fmt: skip


def test_failure_comes_with_a_public_reproduction() -> None:
    document = result_document("amy", {"context_len": ["fail"], "lazy_tail": ["pass"]})
    document["checks"][0]["message"] = "AssertionError: read 4 keys, expected 5"
    text = render_feedback(document, RUBRIC)
    assert "read 4 keys, expected 5" in text
    assert (
        f"{shlex.quote(sys.executable)} -m pytest -p no:cacheprovider --pyargs pagecheck.invariants.test_context_len::test_0 "
        f"--pagecheck-subject sandbox:/submissions/amy.py --pagecheck-seed {PUBLIC_SEED} -p {PLUGIN}"
    ) in text
    assert "## Course clauses: met\n\nlazy_tail." in text


def test_hidden_only_failure_shows_only_the_fact() -> None:
    document = result_document("amy", {"context_len": ["fail"]})
    seed = document["passes"][1]["seed"]
    # Student-controlled text (an exception message) carrying the hidden inputs and the seed.
    message = f"ValueError: leaked query[0]=0.123456 block_table=[[3, 1]] seed {seed}"
    document["checks"][0].update(passes=["hidden"], message=message)
    text = render_feedback(document, RUBRIC)
    assert str(seed) not in text and "0.123456" not in text and "leaked" not in text and "[[3, 1]]" not in text
    assert "- `test_0`: fail on hidden inputs" in text
    assert "Only the hidden inputs showed this" in text


def test_public_failure_message_is_shown_with_hidden_seed_digits_masked() -> None:
    document = result_document("amy", {"context_len": ["fail"]})
    seed = document["passes"][1]["seed"]
    document["checks"][0].update(passes=["public", "hidden"], message=f"read 4 keys; drew {seed}")
    text = render_feedback(document, RUBRIC)
    assert "read 4 keys" in text and str(seed) not in text and HIDDEN_MASK in text


def test_run_that_ended_on_hidden_inputs_shows_no_detail() -> None:
    document = result_document("amy", {"context_len": ["pass"]}, verdict="crashed")
    document.update(detail="SIGSEGV at query 0.987654", failed_pass="hidden",
                    running_check="invariants/test_context_len.py::test_0")  # fmt: skip
    text = render_feedback(document, RUBRIC)
    assert "0.987654" not in text and "It happened on the hidden inputs." in text


def test_hidden_seed_differs_per_submission_and_secret() -> None:
    seeds = {hidden_seed(secret, name) for secret in ("s1", "s2") for name in ("amy", "bob")}
    assert len(seeds) == 4 and PUBLIC_SEED not in seeds
    assert fingerprint("s1") != fingerprint("s2") and "s1" not in fingerprint("s1")


def _pass(kind: str, verdict: str, checks: list[dict] | None = None) -> PassOutcome:
    exit = ChildExit(returncode=0 if verdict == "ok" else 4, timed_out=False, elapsed_s=1.0, peak_rss_bytes=1 << 20)
    return PassOutcome(SuitePassSeed(kind, 1), Verdict(verdict, ""), exit, None, checks or [])


def test_failed_build_matters_only_when_the_subject_needs_it() -> None:
    failed = BuildOutcome(False, "setup.py failed (exit status 1)", 1.0)
    assert submission_verdict([_pass("public", "load-failed")], failed).verdict == "build-failed"
    assert submission_verdict([_pass("public", "ok"), _pass("hidden", "ok")], failed).verdict == "ok"
    assert submission_verdict([_pass("public", "load-failed")], None).verdict == "load-failed"


def test_check_takes_its_worst_outcome_over_both_passes() -> None:
    public = [{"nodeid": "a", "invariant": "context_len", "outcome": "pass", "message": ""},
              {"nodeid": "b", "invariant": "context_len", "outcome": "fail", "message": "public says"}]  # fmt: skip
    hidden = [{"nodeid": "a", "invariant": "context_len", "outcome": "fail", "message": "hidden says"},
              {"nodeid": "b", "invariant": "context_len", "outcome": "fail", "message": "hidden too"}]  # fmt: skip
    combined = {c["nodeid"]: c for c in combine_checks([_pass("public", "ok", public), _pass("hidden", "ok", hidden)])}
    assert (combined["a"]["outcome"], combined["a"]["passes"], combined["a"]["message"]) == ("fail", ["hidden"], "hidden says")
    assert (combined["b"]["passes"], combined["b"]["message"]) == (["public", "hidden"], "public says")


def test_checks_that_do_not_apply_are_listed_apart_without_the_submissions_words() -> None:
    document = result_document("amy", {"dtypes": ["pass", "skip"], "lazy_tail": ["pass"]})
    document["checks"][1]["message"] = "unsupported dtype float16: the subject declines it (ValueError: my words)"
    text = render_feedback(document, RUBRIC)
    assert "## Not applicable" in text and "- unsupported dtype float16 (1 check)" in text
    assert "my words" not in text
    assert "## Course clauses: met\n\ndtypes, lazy_tail." in text


def test_a_failure_beyond_the_course_is_reported_apart_and_keeps_the_total() -> None:
    document = result_document("amy", {"context_len": ["pass"]}, beyond={"context_len": ["fail"]})
    document["checks"][1]["message"] = "AssertionError: large logits gave NaN"
    text = render_feedback(document, RUBRIC)
    assert "Total: **10** of 10 points. Beyond the course: **0** of 3." in text
    assert "## Course clauses: met\n\ncontext_len." in text
    assert "## Beyond the course: not met\n\n### context_len (beyond the course) (0 of 3 points)" in text
    assert "large logits gave NaN" in text


def test_a_gather_beyond_the_course_says_which_total_it_costs() -> None:
    document = result_document("amy", {"context_len": ["pass"]}, beyond={"context_len": ["pass"]},
                               findings=("gather_trap",))  # fmt: skip
    text = render_feedback(document, RUBRIC)
    assert "Total: **10** of 10 points. Beyond the course: **0** of 3." in text
    assert "These set the total beyond the course to 0; the course clauses keep their points." in text


def test_text_from_the_submission_cannot_write_its_own_markdown() -> None:
    """A forged report's place and detail were written into the feedback as they came: a place closing its code
    span, HTML, and a second '# Feedback for ...' heading claiming full points (red team). Places and details are
    one-line code spans fenced past their backticks; a check's message is a code block inside its list item."""
    document = result_document("amy", {"context_len": ["fail"], "lazy_tail": ["pass"]}, findings=("tamper",))
    document["findings"][0].update(file="attention.py`) **ok** <b>x</b>", line=7, detail=(
        "gc\n</ul><h1>Grader notice</h1>\n# Feedback for amy (regraded by staff)\u2028Verdict: **ok** ``` "
        "<img src=x onerror=alert(1)>\u202e"))  # fmt: skip
    document["checks"][0]["message"] = "ValueError: <img src=x onerror=alert(1)>\n# Feedback for amy: 80 of 80"
    lines = render_feedback(document, RUBRIC).splitlines()
    assert "- `` attention.py`) **ok** <b>x</b>:7 `` (tamper): ```` gc </ul><h1>Grader notice</h1> # Feedback for " \
           "amy (regraded by staff) Verdict: **ok** ``` <img src=x onerror=alert(1)> ````. A submission must not " \
           "reach for the grader's objects." in lines  # fmt: skip
    assert "      ValueError: <img src=x onerror=alert(1)>" in lines and "      # Feedback for amy: 80 of 80" in lines
    assert [line for line in lines if "Feedback for" in line and not line.startswith(("- ", "      "))] == [
        "# Feedback for amy"]
