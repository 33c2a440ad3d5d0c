"""Grading one submission from start to its results file.

Stage a copy into OUT/work/<name>/ (the child's working directory and HOME),
build the extension if it has one, run the suite twice (public seed, then
hidden seed; the second only if the first finished), combine the two passes
check by check, scan the source, and write OUT/results/<name>.json
atomically. Logs stay in OUT/logs/<name>/; the working copy is removed.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from pagecheck.grading.anticheat import Finding, scan_submission
from pagecheck.grading.build import BuildOutcome, build_command, build_extension
from pagecheck.grading.plan import GradePlan
from pagecheck.grading.results_store import FORMAT, VERSION, result_path, write_json_atomic
from pagecheck.grading.sandbox import LiveChildren, Limits, child_environment
from pagecheck.grading.seeds import MIN_SECRET_LENGTH, pass_seeds
from pagecheck.grading.submission import Submission, content_digest, stage_copy
from pagecheck.grading.suite_pass import PassOutcome, code_roots, run_suite_pass
from pagecheck.grading.verdicts import Verdict

# A check's outcome over both passes is the most serious of its outcomes.
SEVERITY = ("fail", "error", "skip", "pass")


def combine_checks(passes: list[PassOutcome]) -> list[dict[str, Any]]:
    """One entry per check: the worst outcome over the passes, with the message and passes that gave it."""
    combined: dict[str, dict[str, Any]] = {}
    for outcome in passes:
        for check in outcome.checks:
            entry = combined.setdefault(
                check["nodeid"],
                {"nodeid": check["nodeid"], "invariant": check["invariant"], "outcome": "pass", "message": "", "passes": []},
            )
            rank, current = SEVERITY.index(check["outcome"]), SEVERITY.index(entry["outcome"])
            if rank < current:
                entry["outcome"], entry["message"], entry["passes"] = check["outcome"], check["message"], []
            if check["outcome"] == entry["outcome"] and check["outcome"] != "pass":
                entry["passes"].append(outcome.seed.kind)
    return [combined[nodeid] for nodeid in sorted(combined)]


def submission_verdict(passes: list[PassOutcome], build: BuildOutcome | None) -> Verdict:
    last = passes[-1].verdict
    if last.verdict == "load-failed" and build is not None and not build.ok:
        return Verdict("build-failed", f"{build.detail}; without it the subject does not load: {last.detail}")
    return last


SECRET_MASK = "<secret>"


def _student_paths(text: str, student_dir: Path) -> str:
    """Staged absolute paths shown relative to where the student runs commands from."""
    return text.replace(f"{student_dir}/", "").replace(str(student_dir), ".")


def _shown(text: str, student_dir: Path, secret: str) -> str:
    """A message as results (and so feedback) keep it: student paths, and the secret masked should the
    submission have found and printed it (it runs as the grader's user)."""
    shown = _student_paths(text, student_dir)
    # A short secret would mask ordinary digits and words; it is guessable anyway (the command warns).
    return shown.replace(secret, SECRET_MASK) if len(secret) >= MIN_SECRET_LENGTH else shown


def _trap_findings(passes: list[PassOutcome], student_dir: Path) -> list[Finding]:
    """One finding per place that called the trapped SDPA, naming the first check that got there."""
    checks_by_place: dict[str, list[str]] = {}
    for outcome in passes:
        for call in outcome.trap_calls:
            checks_by_place.setdefault(_student_paths(call["where"], student_dir), []).append(call["nodeid"])
    findings = []
    for place, nodeids in checks_by_place.items():
        file, _, line = place.rpartition(":")
        detail = f"trapped {len(nodeids)} times, first during {nodeids[0].split('::', 1)[-1]}"
        findings.append(Finding(file, int(line) if line.isdigit() else 0, "sdpa_trap", detail))
    return sorted(findings)


def grade_submission(
    submission: Submission, plan: GradePlan, out: Path, *, digest: str | None = None, live: LiveChildren | None = None
) -> dict[str, Any]:
    started_at, start = time.time(), time.monotonic()
    out = out.resolve()  # the children run elsewhere: every path they are given is absolute
    digest = content_digest(submission) if digest is None else digest
    work, logs = out / "work" / submission.name, out / "logs" / submission.name
    for directory in (work, logs):
        shutil.rmtree(directory, ignore_errors=True)
    logs.mkdir(parents=True)
    staged = work / "staged"
    root = stage_copy(submission, staged)
    env = child_environment(work, [*code_roots(), *submission.import_paths(staged)])

    build = None
    command = build_command(root) if submission.kind == "tiny-llm" else None
    if command is not None:
        build_limits = Limits(plan.build_timeout_s, plan.limits.memory_bytes)
        build = build_extension(root, command, env=env, limits=build_limits, log_path=logs / "build.log", live=live)

    passes: list[PassOutcome] = []
    for seed in pass_seeds(plan.secret, submission.name):
        outcome = run_suite_pass(submission.subject_spec(staged), seed, plan, work=work, env=env,
                                 log_path=logs / f"{seed.kind}.log", live=live)  # fmt: skip
        passes.append(outcome)
        if outcome.verdict.verdict != "ok":
            break

    verdict = submission_verdict(passes, build)
    student_dir = submission.student_dir(staged)
    scanned = scan_submission(root, student_dir, submission.import_root(staged))
    findings = sorted({*scanned, *_trap_findings(passes, student_dir)})
    document = {
        "format": FORMAT,
        "version": VERSION,
        "name": submission.name,
        "kind": submission.kind,
        "source": str(submission.path),
        "student_spec": submission.student_spec(),
        "student_pythonpath": submission.student_pythonpath(),
        "digest": digest,
        "settings": plan.settings(),
        "verdict": verdict.verdict,
        "detail": _shown(verdict.detail, student_dir, plan.secret),
        "running_check": passes[-1].running_check if verdict.verdict != "ok" else None,
        "failed_pass": passes[-1].seed.kind if verdict.verdict != "ok" else None,
        "build": build.as_dict() if build is not None else None,
        "passes": [p.as_dict() for p in passes],
        "checks": [{**c, "message": _shown(c["message"], student_dir, plan.secret)} for c in combine_checks(passes)],
        "findings": [f.as_dict() for f in findings],
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started_at)),
        "elapsed_s": round(time.monotonic() - start, 3),
    }
    write_json_atomic(result_path(out, submission.name), document)
    shutil.rmtree(work, ignore_errors=True)
    return document
