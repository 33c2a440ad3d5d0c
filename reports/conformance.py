"""The conformance verdict: per-check results of the invariants suite, grouped by invariant.

An invariant holds when it has at least one check and none of its checks
failed or errored; skipped checks (a subject without BatchingKvCache, no
GPU) neither break nor prove it. Each invariant also has a verdict over its
checks that mirror the course's own tests and one over the rest (beyond the
course): a subject the course accepts breaks no course clause, whatever the
stricter checks say. Broken invariants are listed likely cause
first (pagecheck.start_here), and a suite that crashed is reported as a
crash with its cause (pagecheck.suite_crash), not as a verdict.
"""

from __future__ import annotations

from typing import Any

from pagecheck.invariants.course import BEYOND_COURSE_MARK, COURSE_MARK
from pagecheck.invariants.runner import rerun_command
from pagecheck.reports.start_here import WHY, first_failure, in_cause_order
from pagecheck.reports.suite_crash import crash_report
from pagecheck.invariants.runner import SuiteRequest, SuiteRun

# pytest's exit statuses that mean the suite ran but reached no verdicts; the crashing ones are in suite_crash.
PYTEST_BROKEN = {5: "no checks collected"}
OUTCOMES = ("pass", "fail", "error", "skip")
SCOPES = (COURSE_MARK, BEYOND_COURSE_MARK)


def invariant_verdict(counts: dict[str, int]) -> str:
    if counts["fail"]:
        return "fail"
    if counts["error"]:
        return "error"
    if counts["pass"]:
        return "pass"
    return "skip" if counts["skip"] else "not_run"


def group_by_invariant(results: dict[str, Any], selected: tuple[str, ...]) -> list[dict[str, Any]]:
    """One entry per catalog invariant (or only the selected ones), in catalog order."""
    catalog: dict[str, str] = results["invariants"]
    ids = [i for i in catalog if not selected or i in selected]
    groups = {
        i: {"id": i, "description": catalog[i], "counts": dict.fromkeys(("pass", "fail", "error", "skip", "total"), 0),
            "failures": [], "skip_reasons": {}, "advice": []}
        for i in ids
    }  # fmt: skip
    by_scope = {i: {scope: dict.fromkeys(OUTCOMES, 0) for scope in SCOPES} for i in ids}
    for check in results["checks"]:
        group = groups.get(check["invariant"])
        if group is None:
            continue
        if check.get("scope") in SCOPES:
            by_scope[check["invariant"]][check["scope"]][check["outcome"]] += 1
        group["counts"][check["outcome"]] += 1
        group["counts"]["total"] += 1
        if check["outcome"] in ("fail", "error"):
            group["failures"].append(
                {**{k: check[k] for k in ("nodeid", "outcome", "message", "duration")}, "scope": check.get("scope")}
            )
        elif check["outcome"] == "skip":
            reasons = group["skip_reasons"]
            reasons[check["message"]] = reasons.get(check["message"], 0) + 1
        group["advice"] += [{"nodeid": check["nodeid"], "text": text} for text in check.get("advice", [])]
    for group in groups.values():
        group["verdict"] = invariant_verdict(group["counts"])
        # The same verdict over the checks that mirror the course's own tests, and over the rest.
        group["course_verdict"] = invariant_verdict(by_scope[group["id"]][COURSE_MARK])
        group["beyond_verdict"] = invariant_verdict(by_scope[group["id"]][BEYOND_COURSE_MARK])
        # Failures before errors, then node-id order: the same run reads the same however xdist ordered it.
        group["failures"].sort(key=lambda f: (f["outcome"] != "fail", f["nodeid"]))
        # Many checks skip for one reason (a missing class): each reason once, with its count.
        group["skip_reasons"] = [{"reason": r, "checks": n} for r, n in group["skip_reasons"].items()]
        group["advice"].sort(key=lambda a: a["nodeid"])
    return list(groups.values())


def unattributed_problems(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Failures no invariant owns: collection errors, checks without a catalog id."""
    catalog = results["invariants"]
    return [
        {k: check[k] for k in ("nodeid", "outcome", "message", "duration")}
        for check in results["checks"]
        if check["invariant"] not in catalog and check["outcome"] in ("fail", "error")
    ]


def suite_problem(run: SuiteRun, results: dict[str, Any] | None, crash: dict[str, Any] | None) -> str | None:
    """Why the suite's verdicts cannot be trusted, or None when it ran to completion."""
    if crash is not None:
        return f"the invariants suite crashed: {crash['what']} (see {run.log_path.name})"
    if run.returncode in PYTEST_BROKEN:
        return f"pytest stopped: {PYTEST_BROKEN[run.returncode]} (exit status {run.returncode}; see {run.log_path.name})"
    return None


def start_here(invariants: list[dict[str, Any]], broken: list[str], results: dict[str, Any]) -> dict[str, Any] | None:
    """The likely cause among the broken invariants, its first failing check and the command that reruns it."""
    if not broken:
        return None
    cause = next(inv for inv in invariants if inv["id"] == broken[0])
    failure = first_failure(cause["failures"])
    return {
        "invariant": cause["id"],
        "why": WHY.get(cause["id"], ""),
        "explains": broken[1:],
        "nodeid": failure["nodeid"],
        "outcome": failure["outcome"],
        "message": failure["message"],
        "command": rerun_command(
            failure["nodeid"], subject=results["subject"], device=results["device"], seed=results["seed"],
            profile=results["profile"],
        ),
    }  # fmt: skip


def conformance_body(
    run: SuiteRun, results: dict[str, Any] | None, selected: tuple[str, ...], request: SuiteRequest | None = None
) -> dict[str, Any]:
    """conformance.json's body. `request` is the run asked for: it names the Hypothesis profile when no
    results do, and a crashed suite's rerun command comes from it."""
    crash = crash_report(run.returncode, results, run.log_path)
    profile = request.profile if request is not None else None
    if crash is not None:
        crash["command"] = None if request is None else rerun_command(
            None, subject=request.subject, device=request.device, seed=request.seed, profile=request.profile,
            invariants=request.invariants,
        )  # fmt: skip
    problem = suite_problem(run, results, crash)
    invariants = group_by_invariant(results, selected) if results is not None else []
    stray = unattributed_problems(results) if results is not None else []
    counts = [inv["counts"] for inv in invariants]
    broken = in_cause_order([inv["id"] for inv in invariants if inv["verdict"] in ("fail", "error")])
    if problem is None and stray:
        problem = f"{len(stray)} checks failed outside any invariant (see unattributed)"
    return {
        "verdict": "crash" if crash else "error" if problem else "fail" if broken else "pass",
        "subject_error": None,
        "invariants": invariants,
        "unattributed": stray,
        "broken_invariants": broken,
        "start_here": start_here(invariants, broken, results) if results is not None else None,
        "totals": {
            "checks": sum(c["total"] for c in counts),
            "pass": sum(c["pass"] for c in counts),
            "fail": sum(c["fail"] for c in counts),
            "error": sum(c["error"] for c in counts),
            "skip": sum(c["skip"] for c in counts),
            "invariants": len(invariants),
            "invariants_held": sum(1 for inv in invariants if inv["verdict"] == "pass"),
            "invariants_failed": len(broken),
            "course_clauses_failed": sum(1 for inv in invariants if inv["course_verdict"] in ("fail", "error")),
            "invariants_unchecked": sum(1 for inv in invariants if inv["verdict"] in ("skip", "not_run")),
        },
        "suite": {
            "command": run.command,
            "returncode": run.returncode,
            "elapsed_s": run.elapsed_s,
            "log": run.log_path.name,
            "selected_invariants": list(selected),
            "hypothesis_profile": results["profile"] if results is not None else profile,
            "problem": problem,
            "crash": crash,
        },
    }
