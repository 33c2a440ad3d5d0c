"""Start here: broken invariants likely cause first, the first failing check's counterexample and a rerun command
that works from any directory."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from pagecheck.invariants.catalog import INVARIANTS
from pagecheck.cli import main
from pagecheck.exit_codes import ExitCode
from pagecheck.invariants.runner import rerun_command
from pagecheck.reports.start_here import CAUSE_PRECEDENCE, first_failure, in_cause_order
from pagecheck.reports.schema_check import schema_errors

MUTANTS = Path(__file__).resolve().parent / "mutants"
RERUN_LIMIT_S = 300
SEED = 11  # not the suite's default, so a rerun command that dropped it would not draw the same inputs


def test_the_precedence_table_ranks_every_invariant_once() -> None:
    ranked = [invariant for invariant, _ in CAUSE_PRECEDENCE]
    assert sorted(ranked) == sorted(INVARIANTS) and len(ranked) == len(set(ranked))
    assert all(why for _, why in CAUSE_PRECEDENCE)


def test_context_length_block_order_and_dtypes_come_before_what_they_explain() -> None:
    consequences = ["batch_consistency", "page_boundaries", "gqa_mapping", "dispatch_paths", "head_dims", "alias_free"]
    ordered = in_cause_order([*consequences, "dtypes", "block_table_order", "context_len"])
    assert ordered[:3] == ["context_len", "block_table_order", "dtypes"]
    # Eager page allocation also breaks context_len and alias_free: the cache's bookkeeping ranks first.
    assert in_cause_order(["context_len", "alias_free", "lazy_tail"])[0] == "lazy_tail"


def test_the_first_failure_is_a_failed_check_before_an_errored_one_then_by_node_id() -> None:
    failures = [
        {"nodeid": "invariants/test_x.py::c", "outcome": "fail"},
        {"nodeid": "invariants/test_x.py::a", "outcome": "error"},
        {"nodeid": "invariants/test_x.py::b", "outcome": "fail"},
        {"nodeid": "invariants/test_x.py::d", "outcome": "fail"},
    ]
    assert first_failure(failures)["nodeid"] == "invariants/test_x.py::b"


def test_the_rerun_command_names_everything_absolutely(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.py").write_text("")
    command = rerun_command("invariants/test_context_len.py::test_x[3]", subject="mine.py", device="cpu", seed=7,
                            profile="thorough")  # fmt: skip
    assert f"--pagecheck-subject {tmp_path / 'mine.py'}" in command
    assert "--pagecheck-seed 7" in command and "--pagecheck-profile thorough" in command
    # The check by its rootdir-independent id, quoted for the shell.
    assert "--pyargs 'pagecheck.invariants.test_context_len::test_x[3]'" in command
    module = rerun_command(None, subject="my_pkg.attention", device="gpu", seed=1, profile="default")
    assert module.startswith(f"PYTHONPATH={tmp_path}") and "--pagecheck-device gpu" in module
    assert "--pyargs pagecheck.invariants " in module


def report_on(mutant: str, invariants: tuple[str, ...], out: Path) -> tuple[int, dict]:
    selected = [word for invariant in invariants for word in ("--invariant", invariant)]
    code = main(["report", "--quick", "--subject", str(MUTANTS / f"{mutant}.py"), *selected, "--jobs", "2",
                 "--seed", str(SEED), "--skip", "tolerance", "--skip", "bench", "--out", str(out)])  # fmt: skip
    return code, json.loads((out / "conformance.json").read_text())


def test_a_mutant_report_starts_with_its_root_cause_and_a_rerun_command_that_works_elsewhere(tmp_path: Path) -> None:
    # context_minus_one breaks all three; catalog order and cause order differ on them.
    code, document = report_on("context_minus_one", ("gqa_mapping", "block_table_order", "context_len"), tmp_path / "r")
    assert code == ExitCode.INVARIANT_FAILED
    assert schema_errors("conformance", document) == []
    assert document["broken_invariants"] == ["context_len", "block_table_order", "gqa_mapping"]
    start = document["start_here"]
    assert start["invariant"] == "context_len" and start["explains"] == ["block_table_order", "gqa_mapping"]
    assert f"--pagecheck-seed {SEED}" in start["command"]
    failing = [f["nodeid"] for inv in document["invariants"] if inv["id"] == "context_len" for f in inv["failures"]]
    assert start["nodeid"] == sorted(failing)[0]
    index = (tmp_path / "r" / "index.md").read_text()
    # The index opens with the cause: the first section after the title.
    assert index.split("\n## ")[1].startswith("Start here: `context_len`")
    assert start["command"] in index and start["message"].splitlines()[0] in index
    conformance = (tmp_path / "r" / "conformance.md").read_text()
    assert conformance.index("## Start here") < conformance.index("## Invariants")
    # Pasted into a shell elsewhere, with nothing of the report's environment, it reruns that check and it fails the same way.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTEST_XDIST_WORKER")}
    done = subprocess.run(["bash", "-c", start["command"]], cwd=elsewhere, env=env, capture_output=True, text=True,
                          timeout=RERUN_LIMIT_S)  # fmt: skip
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "1 failed" in done.stdout
    layout = next(line.strip() for line in start["message"].splitlines() if line.strip().startswith("layout:"))
    assert layout in done.stdout


def test_the_cache_bookkeeping_outranks_the_context_length_it_breaks(tmp_path: Path) -> None:
    code, document = report_on("eager_page_allocation", ("context_len", "alias_free", "lazy_tail"), tmp_path)
    assert code == ExitCode.INVARIANT_FAILED
    # context_len comes first in the catalog, and it is broken too (a block table past the context).
    assert document["broken_invariants"] == ["lazy_tail", "context_len", "alias_free"]
    assert document["start_here"]["invariant"] == "lazy_tail"
    assert "## Start here: `lazy_tail`" in (tmp_path / "index.md").read_text()
