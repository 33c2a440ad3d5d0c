"""What a finished result must match to be reused: the run's options and the grader that made it."""

from __future__ import annotations

from pathlib import Path

from pagecheck.grading.plan import GradePlan, grader_fingerprint, source_fingerprint
from pagecheck.grading.results_store import reuse_reason
from pagecheck.grading.sandbox import Limits
from tests.grading_results import result_document


def test_the_source_fingerprint_follows_the_code_and_nothing_else(tmp_path: Path) -> None:
    suite, grader = tmp_path / "suite", tmp_path / "grader"
    (suite / "checks").mkdir(parents=True)
    grader.mkdir()
    (suite / "checks" / "test_a.py").write_text("assert True\n")
    (grader / "rubric.toml").write_text("x = 1\n")
    first = source_fingerprint([suite, grader])
    (suite / "checks" / "__pycache__").mkdir()
    (suite / "checks" / "__pycache__" / "test_a.cpython-311.pyc").write_bytes(b"\0")
    (suite / "README.md").write_text("prose\n")
    assert source_fingerprint([suite, grader]) == first
    (grader / "rubric.toml").write_text("x = 2\n")
    assert source_fingerprint([suite, grader]) != first
    (grader / "rubric.toml").write_text("x = 1\n")
    (suite / "checks" / "test_a.py").rename(suite / "checks" / "test_b.py")  # same bytes, another file
    assert source_fingerprint([suite, grader]) != first
    assert source_fingerprint([grader, suite]) != source_fingerprint([suite, grader])


def test_a_result_from_another_grader_is_graded_again() -> None:
    """A grader fixed since a result was made (a check, the oracle, the sandbox) must not hand out that
    result's verdict again: the grader's fingerprint is one of the settings a rerun must match."""
    plan = GradePlan(secret="s" * 16, limits=Limits(60, 1 << 30), build_timeout_s=60, profile="default", device="cpu")
    settings = plan.settings()
    assert settings["grader"] == grader_fingerprint() and len(settings["grader"]) == 16
    document = result_document("s", {"context_len": ["pass"]}, settings=settings)
    document["digest"] = "d" * 64
    assert reuse_reason(document, "d" * 64, settings) is None
    older = {**settings, "grader": "0" * 16}
    assert reuse_reason(document, "d" * 64, older) == "the grading settings changed"


def test_a_gpu_run_limits_the_data_segment_and_a_cpu_run_the_address_space() -> None:
    # MLX's CUDA back-end reserves far more address space than it uses: under a 4 GiB RLIMIT_AS it does not load.
    for device, kind in (("cpu", "address_space"), ("gpu", "data")):
        plan = GradePlan(secret="s" * 16, limits=Limits(60, 1 << 30), build_timeout_s=60, profile="default",
                         device=device)  # fmt: skip
        assert (plan.trusted_limits.memory_kind, plan.worker_limits.memory_kind) == (kind, kind)
