"""Grading one submission from start to its results file.

Stage a copy into OUT/work/<name>/staged, build the extension if it has one
(in the sandbox), run the suite twice, one pass after the other (public seed,
then hidden seed, only if the public pass finished), each time in
a trusted child whose worker hosts the submission in the sandbox, combine the two passes check by
check, scan the source, turn what the worker's tripwires reported into
findings, and write OUT/results/<name>.json atomically. Logs stay in
OUT/logs/<name>/ (the suite's, the worker's, the build's); the working copy
is removed.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from pagecheck.grading.anticheat import Finding, scan_submission
from pagecheck.grading.build import BuildOutcome, build_command, build_extension
from pagecheck.grading.launcher import SCRATCH_PLACEHOLDER, SUBMISSION_DIR
from pagecheck.grading.plan import GradePlan
from pagecheck.grading.remote_subject import FORGED_EVENT, LINE_NUMBER
from pagecheck.grading.results_store import FORMAT, VERSION, result_path, write_json_atomic
from pagecheck.grading.sandbox import LiveChildren, Limits, child_environment
from pagecheck.grading.seeds import MIN_SECRET_LENGTH, SuitePassSeed, pass_seeds
from pagecheck.grading.submission import Submission, SubmissionFilesError, content_digest, stage_copy
from pagecheck.grading.suite_pass import PassOutcome, import_roots, run_suite_pass
from pagecheck.grading.verdicts import Verdict
from pagecheck.grading.wire import PIPE_SWAP, clean_text
from pagecheck.grading.worker_process import WorkerSettings

# A check's outcome over both passes is the most serious of its outcomes.
SEVERITY = ("fail", "error", "skip", "pass")


def combine_checks(passes: list[PassOutcome]) -> list[dict[str, Any]]:
    """One entry per check: the worst outcome over the passes, with the message and passes that gave it."""
    combined: dict[str, dict[str, Any]] = {}
    for outcome in passes:
        for check in outcome.checks:
            entry = combined.setdefault(
                check["nodeid"],
                {"nodeid": check["nodeid"], "invariant": check["invariant"], "scope": check.get("scope"),
                 "outcome": "pass", "message": "", "passes": []},
            )  # fmt: skip
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
# Worker reports -> finding kinds (rubric.py). Refused imports and reads of the harness are project_import.
EVENT_FINDINGS = {
    "sdpa_trap": "sdpa_trap",
    "gather_trap": "gather_trap",
    "harness_import": "project_import",
    "harness_read": "project_import",
    "introspection": "tamper",
    "reimport": "tamper",
    PIPE_SWAP: "tamper",
    FORGED_EVENT: "tamper",
}
HIDDEN_PLACE = "(hidden inputs)"


def _student_paths(text: str, student_dirs: list[str]) -> str:
    """Staged and sandboxed absolute paths shown relative to where the student runs commands from."""
    for directory in student_dirs:
        text = text.replace(f"{directory}/", "").replace(directory, ".")
    return text


def _shown(text: str, student_dirs: list[str], secret: str) -> str:
    """A message as results (and so feedback) keep it: printable text, student paths, and the secret masked
    (the worker never receives it; this is the last line of defence)."""
    shown = _student_paths(clean_text(text), student_dirs)
    # A short secret would mask ordinary digits and words; it is guessable anyway (the command warns).
    return shown.replace(secret, SECRET_MASK) if len(secret) >= MIN_SECRET_LENGTH else shown


def _event_detail(kind: str, event: dict[str, Any]) -> str:
    if kind == "gather_trap":
        return f"built an array of shape {tuple(event.get('shape', ()))} from the pages with {event.get('op', '?')}"
    return str(event.get("detail", kind))


def _worker_findings(passes: list[PassOutcome], student_dirs: list[str], secret: str) -> list[Finding]:
    """One finding per kind and place the worker reported, naming the first check that got there. A kind that
    only the hidden pass showed keeps no place, text, count or check from the worker: any of them could carry
    hidden inputs."""
    seen: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
    public_kinds = {EVENT_FINDINGS.get(str(e.get("event"))) for p in passes if p.seed.kind == "public" for e in p.events}
    for outcome in passes:
        for event in outcome.events:
            kind = EVENT_FINDINGS.get(str(event.get("event")))
            if kind is None or (outcome.seed.kind != "public" and kind in public_kinds):
                continue
            place = _shown(str(event.get("where", "")), student_dirs, secret)
            detail = _shown(_event_detail(str(event["event"]), event), student_dirs, secret)
            if outcome.seed.kind != "public":
                place, detail = HIDDEN_PLACE, f"reported on the {outcome.seed.kind} inputs"
            seen.setdefault((kind, place), []).append((str(event.get("nodeid", "")), detail, outcome.seed.kind))
    findings = []
    for (kind, place), reports in seen.items():
        # file:line, the line in ASCII digits (remote_subject.LINE_NUMBER); else all file.
        file, _, line = place.rpartition(":")
        if not LINE_NUMBER.fullmatch(line):
            file, line = place, "0"
        nodeid, detail, pass_kind = reports[0]
        if pass_kind != "public":
            # Nor how many times, nor the check: a count chosen from what the hidden inputs hold carried them into
            # the feedback (red team: 405 refused gc calls spelled a hidden context length).
            findings.append(Finding(place, 0, kind, detail))
            continue
        check = nodeid.split("::", 1)[-1] or "the import"
        times = f"{len(reports)} times, first" if len(reports) > 1 else "once,"
        findings.append(Finding(file, int(line), kind, f"{detail}; {times} during {check}"))
    return sorted(findings)


def worker_spec(submission: Submission) -> str:
    """The subject spec inside the worker, where the staged folder is SCRATCH/submission (the loader puts what
    it imports from on sys.path itself)."""
    return submission.spec_in(f"{SCRATCH_PLACEHOLDER}/{SUBMISSION_DIR}")


def _incidents(passes: list[PassOutcome], student_dirs: list[str], secret: str) -> list[dict[str, str]]:
    """Worker crashes, timeouts and allocation failures, each with the check it failed."""
    return [{"pass": outcome.seed.kind, "nodeid": str(e.get("nodeid", "")), "kind": str(e.get("incident", "")),
             "detail": _shown(str(e.get("detail", "")), student_dirs, secret)}
            for outcome in passes for e in outcome.events if e.get("event") == "incident"]  # fmt: skip


def grade_submission(
    submission: Submission, plan: GradePlan, out: Path, *, live: LiveChildren | None = None
) -> dict[str, Any]:
    started_at, start = time.time(), time.monotonic()
    out = out.resolve()  # the children run elsewhere: every path they are given is absolute
    work, logs = out / "work" / submission.name, out / "logs" / submission.name
    for directory in (work, logs):
        shutil.rmtree(directory, ignore_errors=True)
    for private in (out / "work", out / "logs", out / "results"):
        # The grader's eyes only, even where the sandbox cannot hide them (the worker runs as another user).
        private.mkdir(parents=True, exist_ok=True)
        private.chmod(0o700)
    logs.mkdir(parents=True)
    work.mkdir(parents=True)
    staged = work / "staged"
    root = stage_copy(submission, staged)
    # The digest of what was copied, which is what is graded (not the run's digest of the submission, taken
    # earlier: its files may have changed since), so a rerun over other files grades again.
    digest = content_digest(replace(submission, path=root))
    env = child_environment(work, import_roots())
    hide = [str(out)]  # the worker never sees results, feedback, logs or other submissions

    build = None
    command = build_command(root) if submission.kind == "tiny-llm" else None
    if command is not None:
        build_limits = Limits(plan.build_timeout_s, plan.limits.memory_bytes)
        build = build_extension(staged, root, command, limits=build_limits, worker_limits=plan.worker_limits,
                                log_path=logs / "build.log", hide_paths=hide, live=live)  # fmt: skip

    spec = worker_spec(submission)

    def run_pass(seed: SuitePassSeed) -> PassOutcome:
        worker = WorkerSettings(
            spec=spec, copy_in=str(staged), strict=True, device=plan.device,
            limits=plan.worker_limits, call_timeout_s=plan.call_timeout_s,
            log_path=str(logs / f"{seed.kind}-worker.log"), hide_paths=tuple(hide),
        )  # fmt: skip
        return run_suite_pass(submission.student_spec(), seed, plan, worker=worker, work=work, env=env,
                              log_path=logs / f"{seed.kind}.log", live=live)  # fmt: skip

    # One pass after the other, each with its own trusted child and worker: the hidden pass's worker starts once
    # the public pass's has ended, so nothing it sees can reach the public pass's feedback, whatever the two
    # could share while running (timing, the page cache: seccomp.py closes the channels it can). The hidden pass
    # runs only when the public one finished.
    public, hidden = pass_seeds(plan.secret, submission.name)
    passes = [run_pass(public)]
    if passes[0].verdict.verdict == "ok":
        passes.append(run_pass(hidden))

    verdict = submission_verdict(passes, build)
    student_dir = submission.student_dir(staged)
    inside = student_dir.relative_to(staged).as_posix()
    scratch = next((p.scratch for p in passes if p.scratch), "")
    student_dirs = [str(student_dir)] + ([f"{scratch}/{SUBMISSION_DIR}/{inside}".rstrip("/.")] if scratch else [])
    scanned = scan_submission(root, student_dir, submission.import_root(staged))
    findings = sorted({*scanned, *_worker_findings(passes, student_dirs, plan.secret)})
    failed_pass = passes[-1].seed.kind if verdict.verdict != "ok" else None
    detail = _shown(verdict.detail, student_dirs, plan.secret)
    document = {
        "format": FORMAT,
        "version": VERSION,
        "name": submission.name,
        "kind": submission.kind,
        "source": clean_text(str(submission.path)),
        "student_spec": submission.student_spec(),
        "digest": digest,
        "settings": plan.settings(),
        "verdict": verdict.verdict,
        "detail": detail,
        "running_check": passes[-1].running_check if verdict.verdict != "ok" else None,
        "failed_pass": failed_pass,
        "build": build.as_dict() if build is not None else None,
        "passes": [p.as_dict() for p in passes],
        "checks": [{**c, "message": _shown(c["message"], student_dirs, plan.secret)} for c in combine_checks(passes)],
        "findings": [f.as_dict() for f in findings],
        "incidents": _incidents(passes, student_dirs, plan.secret),
        "protections": next((p.protections for p in passes if p.protections), {}),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started_at)),
        "elapsed_s": round(time.monotonic() - start, 3),
    }
    write_json_atomic(result_path(out, submission.name), document)
    shutil.rmtree(work, ignore_errors=True)
    return document


def grader_error_result(submission: Submission, plan: GradePlan, out: Path, digest: str,
                        error: Exception) -> dict[str, Any]:  # fmt: skip
    """The result of a submission the grader itself failed on: crashed, no points, the traceback in its log.
    Written like any result, so the scoreboard lists it and a rerun grades it again only when asked (--force)."""
    import traceback

    text = "".join(traceback.format_exception(error))
    detail = f"the grader failed on this submission ({type(error).__name__}); see logs/{submission.name}/grader.log"
    return _no_check_result(submission, plan, out, digest, "crashed", detail, text)


def unstaged_result(submission: Submission, plan: GradePlan, out: Path, digest: str,
                    error: SubmissionFilesError) -> dict[str, Any]:  # fmt: skip
    """The result of a submission whose files cannot be staged (a folder nested too deep, a file that cannot be
    read): load-failed, no check ran, the reason in its detail and its log."""
    detail = clean_text(f"its files could not be staged: {error}")
    return _no_check_result(submission, plan, out, digest, "load-failed", detail, detail + "\n")


def _no_check_result(submission: Submission, plan: GradePlan, out: Path, digest: str, verdict: str, detail: str,
                     log_text: str) -> dict[str, Any]:  # fmt: skip
    out = out.resolve()
    logs = out / "logs" / submission.name
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / "grader.log", "a", encoding="utf-8", errors="replace") as log:
        log.write(log_text)
    document = {
        "format": FORMAT, "version": VERSION, "name": submission.name, "kind": submission.kind,
        "source": clean_text(str(submission.path)), "student_spec": submission.student_spec(), "digest": digest,
        "settings": plan.settings(), "verdict": verdict, "detail": detail,
        "running_check": None, "failed_pass": "public", "build": None, "passes": [], "checks": [], "findings": [],
        "incidents": [], "protections": {}, "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "elapsed_s": 0.0,
    }  # fmt: skip
    write_json_atomic(result_path(out, submission.name), document)
    shutil.rmtree(out / "work" / submission.name, ignore_errors=True)
    return document
