"""Grading many submissions: what needs grading, and running it in parallel with a progress line.

A submission is graded unless a reusable result for it exists (same content,
same settings; --force ignores them). Up to `jobs` submissions run at once,
each in its own child processes; the terminal shows done/total, which
submissions are running, and the elapsed time.
"""

from __future__ import annotations

import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pagecheck.grading.grade_one import grade_submission, grader_error_result, unstaged_result
from pagecheck.grading.plan import GradePlan
from pagecheck.grading.results_store import load_result, result_path, reuse_reason
from pagecheck.grading.sandbox import GradingInterrupted, LiveChildren
from pagecheck.grading.submission import Submission, SubmissionFilesError, content_digest, unstaged_digest
from pagecheck.progress import StageProgress

PROGRESS_TICK_S = 1.0


@dataclass(frozen=True)
class Job:
    submission: Submission
    digest: str
    reason: str  # why it is graded: "not graded yet", "the submission changed", ...


def jobs_to_run(submissions: list[Submission], plan: GradePlan, out: Path, *, force: bool) -> tuple[list[Job], list[str]]:
    """(submissions to grade, names whose finished results are reused)."""
    settings = plan.settings()
    todo: list[Job] = []
    reused: list[str] = []
    for submission in submissions:
        try:
            digest = content_digest(submission)
        except SubmissionFilesError as exc:
            # Its grading stops at the same error and writes a load-failed result naming it, under a digest
            # of the reason.
            digest = unstaged_digest(exc)
        reason = "--force" if force else reuse_reason(load_result(result_path(out, submission.name)), digest, settings)
        if reason is None:
            reused.append(submission.name)
        else:
            todo.append(Job(submission, digest, reason))
    return todo, reused


class Running:
    """Names of the submissions being graded right now, for the progress line."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._names: set[str] = set()

    def grade(self, job: Job, plan: GradePlan, out: Path, live: LiveChildren) -> dict[str, Any]:
        with self._lock:
            self._names.add(job.submission.name)
        try:
            return grade_submission(job.submission, plan, out, live=live)
        except GradingInterrupted:
            raise
        except SubmissionFilesError as exc:
            return unstaged_result(job.submission, plan, out, job.digest, exc)
        except Exception as exc:
            # Whatever one submission does to the grader stops only its own grading; the run goes on.
            return grader_error_result(job.submission, plan, out, job.digest, exc)
        finally:
            with self._lock:
                self._names.discard(job.submission.name)

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._names)


def run_jobs(todo: list[Job], plan: GradePlan, out: Path, *, jobs: int, live: LiveChildren,
             progress: StageProgress) -> list[dict[str, Any]]:  # fmt: skip
    """Grade every job; results files are written as each one finishes. Re-raises the first grader error."""
    if jobs < 1:
        raise ValueError(f"jobs={jobs} must be at least 1")
    running = Running()
    finished: list[dict[str, Any]] = []
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="grade") as pool:
        pending: set[Future[dict[str, Any]]] = {pool.submit(running.grade, job, plan, out, live) for job in todo}
        try:
            while pending:
                done, pending = wait(pending, timeout=PROGRESS_TICK_S, return_when=FIRST_COMPLETED)
                for future in done:
                    document = future.result()
                    finished.append(document)
                    progress.note(f"{document['name']}: {document['verdict']} ({document['elapsed_s']:.1f} s)")
                progress.update(len(finished), len(todo), "running: " + (", ".join(running.names()) or "-"))
        except BaseException:
            live.kill_all()
            for future in pending:
                future.cancel()
            raise
    return finished
