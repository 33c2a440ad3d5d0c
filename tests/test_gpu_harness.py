"""gpu.harness on a machine without a GPU: what it reports when the warpgroup prefill stops compiling."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pagecheck import ext
from pagecheck.gpu import harness, program


@pytest.fixture
def no_cases(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(program, "cannot_run", lambda: None)
    monkeypatch.setattr(harness, "decode_cases", lambda: [])
    monkeypatch.setattr(harness, "prefill_cases", lambda: [])


def test_a_warpgroup_prefill_that_stops_compiling_fails_the_run(no_cases, monkeypatch, tmp_path: Path) -> None:
    # The op reports warpgroup MMA until its kernel fails to compile, and from then on runs the fallback
    # prefill, whose results still pass: the run must fail anyway.
    answers = iter([True, False])
    monkeypatch.setattr(ext, "gpu_warpgroup_mma", lambda: next(answers))
    out = tmp_path / "harness.json"
    assert harness.main(["--no-big-pool", "--json", str(out)]) == 1
    outcomes = json.loads(out.read_text())
    assert [(o["case"], o["passed"]) for o in outcomes] == [("warpgroup prefill", False)]


@pytest.mark.parametrize("answers", [[True, True], [False, False]], ids=["compiled", "no-warpgroup-mma"])
def test_a_warpgroup_prefill_that_compiled_or_never_ran_adds_no_failure(no_cases, monkeypatch, tmp_path, answers):
    replies = iter(answers)
    monkeypatch.setattr(ext, "gpu_warpgroup_mma", lambda: next(replies))
    out = tmp_path / "harness.json"
    assert harness.main(["--no-big-pool", "--json", str(out)]) == 0
    assert json.loads(out.read_text()) == []
