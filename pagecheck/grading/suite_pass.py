"""One run of the invariants suite on a staged submission, and what it left behind.

The suite runs in a trusted child process (limited, with the grading plugin)
against `--pagecheck-subject sandbox:SPEC`: the submission itself runs in the
sandboxed worker that child starts. The seed reaches the child through a
pipe, never its command line or environment.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pagecheck.grading.child_plugin import PLUGIN, read_journal
from pagecheck.grading.plan import GradePlan
from pagecheck.grading.remote_subject import FORGED_EVENT, WORKER_EVENT_KINDS
from pagecheck.grading.sandbox import ChildExit, LiveChildren, run_limited
from pagecheck.grading.seeds import PUBLIC_SEED, SuitePassSeed
from pagecheck.grading.verdicts import Verdict, classify_pass
from pagecheck.grading.worker_process import WorkerSettings
from pagecheck.invariants.subject import SANDBOX_PREFIX
from pagecheck.invariants.runner import SuiteRequest

# Journal events that come from the worker: its tripwires, its audit hook, the frames it forged, and its incidents.
WORKER_EVENTS = (*sorted(WORKER_EVENT_KINDS), FORGED_EVENT, "incident")

LOG_TAIL_BYTES = 64 << 10


@dataclass(frozen=True)
class PassOutcome:
    seed: SuitePassSeed
    verdict: Verdict
    exit: ChildExit
    running_check: str | None  # the check that had started and not finished when the child ended
    checks: list[dict[str, Any]] = field(default_factory=list)
    trap_calls: list[dict[str, str]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)  # WORKER_EVENTS from the journal
    protections: dict[str, str] = field(default_factory=dict)
    scratch: str = ""  # the worker's scratch folder, as paths in its messages show it

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.seed.kind,
            "seed": self.seed.seed,
            "verdict": self.verdict.verdict,
            "detail": self.verdict.detail,
            "running_check": self.running_check,
            "returncode": self.exit.returncode,
            "signal": self.exit.signal_name,
            "elapsed_s": round(self.exit.elapsed_s, 3),
            "peak_rss_mb": round(self.exit.peak_rss_bytes / (1 << 20), 1),
            "checks_run": len(self.checks),
            "worker_incidents": sum(e["event"] == "incident" for e in self.events),
        }


def code_roots() -> list[Path]:
    """Where the child imports pagecheck from (its layers, the suite among them, resolve through it)."""
    return [Path(__file__).resolve().parent.parent.parent]


def import_roots() -> list[Path]:
    """The trusted child's import path: pagecheck's root, then the folders on the grader's own PYTHONPATH, where
    it found libraries outside the interpreter's site-packages (MLX, NumPy, pytest staged into a folder of their
    own, as on a GPU machine): the child imports the same ones. Only existing absolute folders."""
    roots = code_roots()
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        path = Path(entry)
        if entry and path.is_absolute() and path.is_dir() and path.resolve() not in roots:
            roots.append(path.resolve())
    return roots


def suite_command(spec: str, plan: GradePlan, results: Path, journal: Path, settings: Path, seed_fd: int) -> list[str]:
    request = SuiteRequest(
        subject=SANDBOX_PREFIX + spec, device=plan.device, seed=PUBLIC_SEED, profile=plan.profile, jobs=0,
        results_path=results, invariants=plan.selected,
    )  # fmt: skip
    # One process, checks in file order: no xdist workers to crash separately, no reordering plugin.
    isolation = ["-p", "no:xdist", "-p", "no:randomly"]
    # The seed on the command line above is replaced by the one read from seed_fd.
    return [*request.command(), *isolation, "-p", PLUGIN, "--pagecheck-journal", str(journal),
            "--pagecheck-sandbox", str(settings), "--pagecheck-seed-fd", str(seed_fd)]  # fmt: skip


def _running_check(journal: list[dict[str, Any]]) -> str | None:
    open_checks: dict[str, None] = {}
    for event in journal:
        if event.get("event") == "start":
            open_checks[event["nodeid"]] = None
        elif event.get("event") == "end":
            open_checks.pop(event.get("nodeid", ""), None)
    return next(reversed(open_checks), None) if open_checks else None


def _log_tail(path: Path) -> str:
    with open(path, "rb") as log:
        log.seek(0, 2)
        log.seek(max(0, log.tell() - LOG_TAIL_BYTES))
        return log.read().decode(errors="replace")


def _results(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def run_suite_pass(
    spec: str,
    seed: SuitePassSeed,
    plan: GradePlan,
    *,
    worker: WorkerSettings,
    work: Path,
    env: dict[str, str],
    log_path: Path,
    live: LiveChildren | None,
) -> PassOutcome:
    results_path = work / f"{seed.kind}-results.json"
    journal_path = work / f"{seed.kind}-journal.jsonl"
    settings_path = work / f"{seed.kind}-worker.json"
    settings_path.write_text(worker.as_json())
    seed_r, seed_w = os.pipe()
    os.write(seed_w, f"{seed.seed}\n".encode())
    os.close(seed_w)
    command = suite_command(spec, plan, results_path, journal_path, settings_path, seed_r)
    try:
        exit = run_limited(command, cwd=work, env=env, limits=plan.trusted_limits, log_path=log_path, live=live,
                           pass_fds=(seed_r,))  # fmt: skip
    finally:
        os.close(seed_r)
    journal = read_journal(journal_path)
    results = _results(results_path)
    verdict = classify_pass(exit, journal, results is not None, _log_tail(log_path), plan.trusted_limits.memory_bytes)
    protections = next((e for e in journal if e.get("event") == "protections"), {})
    return PassOutcome(
        seed=seed,
        verdict=verdict,
        exit=exit,
        running_check=_running_check(journal),
        checks=list(results["checks"]) if results is not None and verdict.verdict == "ok" else [],
        trap_calls=[{"nodeid": e["nodeid"], "where": e["where"]} for e in journal if e.get("event") == "sdpa_trap"],
        events=[e for e in journal if e.get("event") in WORKER_EVENTS],
        protections=dict(protections.get("state", {})),
        scratch=str(protections.get("scratch", "")),
    )
