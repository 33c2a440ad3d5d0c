"""No false alarm: implementations the course accepts, each different where its tests leave room, fail no course
clause of the suite (tests/course_variants.py says how each differs).

Each variant is first run through the course's own tests (tests/course_shim.py; skipped where the course folder is
absent), which it must pass, so the list holds only what the course accepts; then the suite's course-clause checks
run on it in a child process and none may fail, nor skip but as "unsupported dtype" (a grade counts any other skip
as a check not passed: pagecheck/grading/scoreboard.py). What a variant does past the course (NaN for an empty row, a
second free's wording, ...) is judged by the checks beyond the course, which are not run here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pagecheck.invariants.course import BEYOND_COURSE_MARK
from pagecheck.invariants.neutral_skips import is_neutral_skip
from tests.course_shim import CourseFolderMissing, course_dir, run_course_tests
from tests.course_variants import FORGING_VARIANTS, VARIANTS, write_variant
from tests.test_mutants import run_suite


def course_run(subject: Path, tmp_path: Path) -> Any:
    """The course's own tests on `subject` (tests/course_shim.py), or None where the course folder is absent."""
    try:
        course = course_dir()
    except CourseFolderMissing:
        return None
    scratch = tmp_path / "course"
    scratch.mkdir()
    return run_course_tests(course, str(subject), scratch)


def not_passed(results: dict[str, Any]) -> dict[str, str]:
    """The checks of a results document that a grade counts as not passed: failures, errors and every skip but a
    neutral one (pagecheck.grading.scoreboard leaves out only "unsupported dtype" skips), each with its outcome and
    message."""
    return {
        c["nodeid"]: f"{c['outcome']}: {c['message'][:400]}"
        for c in results["checks"] if c["outcome"] != "pass" and not is_neutral_skip(c)
    }


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_a_course_accepted_variant_fails_no_course_clause(name: str, tmp_path: Path) -> None:
    subject = write_variant(name, tmp_path)
    run = course_run(subject, tmp_path)
    if run is not None:
        assert run.count("failed") == 0 and run.count("passed") > 0, f"the course rejects variant {name}: {run.messages}"
    results = run_suite(str(subject), [], tmp_path / "results.json", select=f"not {BEYOND_COURSE_MARK}")
    failed = not_passed(results)
    assert not failed, f"course clauses fail or skip variant {name}, which the course accepts: {failed}"
    assert {c["scope"] for c in results["checks"]} == {"course"}, "the run held checks beyond the course"


# Variants whose objects cross the grader's pipe as handles, or whose identity and equality the course's asserts
# read, or whose masks the suite asks of their caches and hands back, or whose attention changes an input in place:
# in the grader's sandbox (where the suite sees them through the worker, and its input guard watches every call)
# they must fail no course clause either. (page_lens_live_view failed there alone: a handle compared with a list was
# never equal; so did prefill_prescales_keys_in_place: the guard failed a change the course never reads; and
# causal_mask_record, whose mask record came back to its attention as a copy of another type, not as itself; and
# str_enum_mask, whose str enum mask came back as a plain str; page_ids_live_view, whose view the course slices,
# and a slice could not cross; value_and_runtime_error_class, whose error, a ValueError and a RuntimeError, crossed
# as a ValueError alone.)
SANDBOXED = ("page_lens_live_view", "numpy_block_table", "key_pages_stored_transposed", "batch_pads_with_last_page",
             "string_causal_aligned_to_the_start", "prefill_prescales_keys_in_place", "rule_phrases_as_exception_notes",
             "causal_mask_record", "str_enum_mask", "causal_resolved_over_pool_slots", "page_ids_live_view",
             "value_and_runtime_error_class", "failed_append_raises_its_own_error", "int_enum_mask",
             "host_page_table", "batch_max_seq_len_counts_every_token", "float_page_count",
             "batch_max_seq_len_counts_every_page", "batch_max_seq_len_in_whole_pages", "dense_appends_of_at_most_2_pages",
             "batch_rows_of_at_most_2_pages")
# Every course-rejected variant fails its check in the sandbox too, where the suite sees the subject through the
# worker (arrays copied across a pipe, in-place changes reported back, identity asked there).
SANDBOXED_FORGING = tuple(sorted(FORGING_VARIANTS))


@pytest.mark.parametrize("name", SANDBOXED)
def test_a_course_accepted_variant_fails_no_course_clause_in_the_sandbox(name: str, tmp_path: Path) -> None:
    subject = write_variant(name, tmp_path)
    results = run_suite(f"sandbox:{subject}", [], tmp_path / "results.json", select=f"not {BEYOND_COURSE_MARK}",
                        plugins=("pagecheck.grading.child_plugin",))  # fmt: skip
    failed = not_passed(results)
    assert not failed, f"course clauses fail or skip variant {name} in the sandbox: {failed}"


def _named_check_outcomes(name: str, subject: Path, tmp_path: Path, sandboxed: bool = False) -> dict[str, str]:
    """The outcomes of the course check FORGING_VARIANTS names for variant `name`, by node id (a name ending in
    [case] names that case alone)."""
    check = FORGING_VARIANTS[name][2]
    module, _, function = check.partition("::")
    invariant = module.rpartition(".test_")[2]
    spec, plugins = (f"sandbox:{subject}", ("pagecheck.grading.child_plugin",)) if sandboxed else (str(subject), ())
    results = run_suite(spec, [invariant], tmp_path / "results.json", select="course", plugins=plugins)
    named = (lambda nodeid: nodeid) if function.endswith("]") else (lambda nodeid: nodeid.partition("[")[0])
    return {c["nodeid"]: c["outcome"] for c in results["checks"] if named(c["nodeid"]).endswith(function)}


@pytest.mark.parametrize("name", sorted(FORGING_VARIANTS))
def test_an_implementation_written_to_slip_past_a_course_check_fails_it(name: str, tmp_path: Path) -> None:
    """No unearned points: each of these fails the course's own tests, and was written against one course check
    of the suite (a red-team finding); that check must fail it."""
    subject = write_variant(name, tmp_path)
    run = course_run(subject, tmp_path)
    if run is not None:
        assert run.count("failed") > 0, f"the course accepts variant {name}: it must not be listed here"
    outcomes = _named_check_outcomes(name, subject, tmp_path)
    assert outcomes and set(outcomes.values()) == {"fail"}, outcomes


@pytest.mark.parametrize("name", SANDBOXED_FORGING)
def test_an_implementation_written_to_slip_past_a_course_check_fails_it_in_the_sandbox(
    name: str, tmp_path: Path
) -> None:
    outcomes = _named_check_outcomes(name, write_variant(name, tmp_path), tmp_path, sandboxed=True)
    assert outcomes and set(outcomes.values()) == {"fail"}, outcomes
