"""The sandbox changes nothing a check can see: the suite gives the same outcome and message, check by check,
in process and through the worker.

Subjects: this project's reference and fast implementation, and mutants that fail in different ways (one
changes its input in place, which only the write-back of in-place changes can show). The worker runs them
in its relaxed mode (they import pagecheck's own code), with every other protection on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pagecheck.grading.worker_process import WorkerSettings

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
INVARIANTS = ("context_len", "release_once", "rejection", "inputs_unchanged", "block_table_order", "page_storage")
SUBJECTS = ["reference", "impl", "tests/mutants/context_minus_one.py", "tests/mutants/block_table_clamped_in_place.py",
            "tests/mutants/double_free_undetected.py", "tests/mutants/append_without_rollback.py",
            "tests/mutants/materialize_gathers_dense.py"]  # fmt: skip


def run_suite(spec: str, results: Path, settings: Path | None) -> dict[str, tuple[str, str]]:
    # The grading plugin in both runs: it checks every call's inputs, whatever runs the subject.
    command = [sys.executable, "-m", "pytest", str(ROOT / "invariants"), "-q", "-p", "no:cacheprovider", "-p",
               "no:xdist", "-p", "pagecheck.grading.child_plugin", "--pagecheck-subject", spec, "--pagecheck-results",
               str(results)]  # fmt: skip
    for invariant in INVARIANTS:
        command += ["--pagecheck-invariant", invariant]
    if settings is not None:
        command += ["--pagecheck-sandbox", str(settings)]
    done = subprocess.run(command, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True,
                          text=True, timeout=900)  # fmt: skip
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    document = json.loads(results.read_text())
    return {c["nodeid"]: (c["outcome"], c["message"]) for c in document["checks"]}


@pytest.mark.parametrize("spec", SUBJECTS, ids=[Path(s).stem for s in SUBJECTS])
def test_same_outcomes_and_messages_through_the_worker(spec: str, tmp_path: Path) -> None:
    settings = tmp_path / "worker.json"
    inside = str(ROOT / spec) if spec.endswith(".py") else spec  # the worker starts in its scratch folder
    settings.write_text(WorkerSettings(spec=inside, import_paths=(str(ROOT),), strict=False,
                                       extra_read_paths=(str(ROOT),)).as_json())  # fmt: skip
    in_process = run_suite(spec, tmp_path / "in-process.json", None)
    sandboxed = run_suite(f"sandbox:{spec}", tmp_path / "sandboxed.json", settings)
    # Failures injected into a subject's methods and the watch on materialize() are installed in the worker
    # (append_without_rollback and materialize_gathers_dense are caught there as here).
    assert sandboxed == in_process
    if "mutants" in spec:  # a mutant that no check catches here would compare nothing of interest
        assert any(outcome == "fail" for outcome, _ in in_process.values())
