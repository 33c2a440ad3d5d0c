"""Mutation testing: every planted bug in tests/mutants/ must be caught by the invariant it names.

Each mutant runs the invariants suite in its own process (a subject is
imported once per process), restricted to the checks of its KILLED_BY
invariant, each Hypothesis search stopping at its first counterexample; the
results JSON says which invariant's check failed. A kill counts only when a
check failed with its own verdict, an InvariantViolation of the KILLED_BY
invariant: an exception the mutant raised itself (one of its own guards, a
crash) is not the suite catching the bug. So every check of the invariant
runs: one where the mutant crashes first must not hide one that catches it. The unmutated reference must pass the same checks, or a
kill would prove nothing. The session summary prints the mutation score.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pagecheck.invariants.catalog import INVARIANTS
from pagecheck.invariants.results import load_results

ROOT = Path(__file__).resolve().parent.parent
MUTANTS_DIR = Path(__file__).resolve().parent / "mutants"
MUTANTS = sorted(p for p in MUTANTS_DIR.glob("*.py") if not p.name.startswith("_"))
RUN_LIMIT_S = 300


def killed_by(mutant: Path) -> str:
    """The mutant's KILLED_BY constant, read without importing it."""
    for node in ast.parse(mutant.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "KILLED_BY" for t in node.targets):
            return ast.literal_eval(node.value)
    raise ValueError(f"{mutant.name} declares no KILLED_BY")


def run_suite(
    subject: str, invariants: list[str], results: Path, *, shrink: bool = True, select: str | None = None,
    plugins: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The suite on `subject` in a child process (only `invariants`' checks when given, only the checks that
    `select`, a pytest -m expression, picks; with `plugins` loaded) and its results document."""
    command = [
        # Plain asserts: the checks raise their own errors, and rewriting Hypothesis's modules on
        # every start (no bytecode cache when PYTHONDONTWRITEBYTECODE is set) costs seconds.
        sys.executable, "-m", "pytest", "invariants", "-q", "-p", "no:randomly", "-p", "no:xdist", "--assert=plain",
        "--pagecheck-subject", subject, "--pagecheck-results", str(results),
    ]
    command += [arg for invariant in invariants for arg in ("--pagecheck-invariant", invariant)]
    command += [arg for plugin in plugins for arg in ("-p", plugin)]
    if not shrink:
        # Whether a check fails, not its smallest counterexample.
        command += ["--hypothesis-profile", "pagecheck-default-noshrink"]
    if select is not None:
        command += ["-m", select]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=RUN_LIMIT_S)
    if not results.exists():
        raise AssertionError(f"no results from {' '.join(command)}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return load_results(results)


KILLING_INVARIANTS = sorted({killed_by(m) for m in MUTANTS})
# The mutants' base, the reference subject, keeps float64 NumPy pages: the course's own cache tests, and the
# checks that replay them, refuse to attend over those with a float32 query. Mutants are judged without them.
NOT_REPLAYS = "not replays_the_course"
# Two halves, so the longest run (the reference on every killing check) spreads over two workers.
HALVES = [KILLING_INVARIANTS[0::2], KILLING_INVARIANTS[1::2]]


@pytest.mark.parametrize("invariants", HALVES, ids=["first-half", "second-half"])
def test_reference_passes_the_killing_checks(invariants: list[str], tmp_path: Path) -> None:
    document = run_suite("reference", invariants, tmp_path / "results.json", select=NOT_REPLAYS)
    bad = {
        c["nodeid"]: f"{c['outcome']}: {c['message'][:300]}" for c in document["checks"] if c["outcome"] in ("fail", "error")
    }
    assert not bad, f"the unmutated reference fails checks the mutants are judged by: {bad}"
    ran = {c["invariant"] for c in document["checks"] if c["outcome"] == "pass"}
    assert ran == set(invariants), f"invariants with no passing check on the reference: {set(invariants) - ran}"


def test_every_mutant_names_a_known_invariant() -> None:
    assert len(MUTANTS) >= 15
    unknown = {m.name: killed_by(m) for m in MUTANTS if killed_by(m) not in INVARIANTS}
    assert not unknown, f"KILLED_BY not in invariants/catalog.py: {unknown}"


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.stem for m in MUTANTS])
def test_mutant_is_killed_by_its_invariant(
    mutant: Path, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    invariant = killed_by(mutant)
    record_property("mutant", mutant.stem)
    document = run_suite(str(mutant), [invariant], tmp_path / "results.json", shrink=False, select=NOT_REPLAYS)
    kills = own_kills(document, invariant)
    record_property("killed", bool(kills))
    outcomes = {c["nodeid"].split("::")[-1]: f"{c['outcome']} {c['message'][:200]}".strip() for c in document["checks"]}
    assert kills, f"{mutant.stem} survived every {invariant} check (or failed one with no verdict of its own): {outcomes}"


def own_kills(document: dict[str, Any], invariant: str) -> list[dict[str, Any]]:
    """The checks of `invariant` that failed with their own verdict, an InvariantViolation naming it."""
    verdict = f"InvariantViolation: [{invariant}]"
    return [
        c for c in document["checks"]
        if c["invariant"] == invariant and c["outcome"] == "fail" and c["message"].startswith(verdict)
    ]


# The reissued-live-page bug in a pool that checks liveness on every write: its own guard raises
# ValueError inside the alias_free checks. That fails them, but it is the mutant's verdict, not the suite's.
GUARDED_REISSUE = """
from pagecheck.reference.pool import TinyKvPagedPool as _ReferencePool
from pagecheck.reference.subject import BatchingKvCache, TinyKvPagedCache, paged_attention


class TinyKvPagedPool(_ReferencePool):
    def allocate_page(self):
        if self._free:
            return self._free[-1]
        return super().allocate_page()
"""


def test_a_failure_without_the_invariants_own_verdict_is_no_kill(tmp_path: Path) -> None:
    subject = tmp_path / "guarded_reissue.py"
    subject.write_text(GUARDED_REISSUE)
    document = run_suite(str(subject), ["alias_free"], tmp_path / "results.json", shrink=False)
    failed = [c for c in document["checks"] if c["outcome"] == "fail"]
    assert failed and all(c["message"].startswith("ValueError") for c in failed), failed
    assert own_kills(document, "alias_free") == []
