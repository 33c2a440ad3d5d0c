"""The operator benchmark as a report: pagecheck.bench run one context at a time, plus a verdict.

pagecheck.bench does the measuring (fresh processes, alternating variant
order, one output of each variant checked against the float64 reference);
this module runs it per context so progress can be shown, merges the parts
into one result with the same keys, and adds what a report needs: the
subject's speedup over each other variant, and whether every output is
within reference.tolerance's table.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any, Callable

from pagecheck.bench.attention import BenchConfig, run_bench
from pagecheck.bench.partial import PartialRun
from pagecheck.reference.tolerance import TOLERANCES

# Benchmark keys indexed [variant][context], as pagecheck.bench writes them.
PER_VARIANT_KEYS = ("samples", "medians_us", "spread_us", "min_us", "max_us", "errors", "correctness")
# The variant every other one is compared with.
MEASURED = "subject"

Progress = Callable[[int, int, int], None]

# Enough fresh processes per point for an interquartile range (pagecheck.bench.process_spread).
FULL_CONFIG = BenchConfig(contexts=(128, 256, 512, 1024, 2048, 4096), repeats=5, warmup=5, iterations=30)
QUICK_CONFIG = BenchConfig(contexts=(128, 1024), repeats=3, warmup=3, iterations=10)


def merge_results(parts: list[dict[str, Any]], config: BenchConfig) -> dict[str, Any]:
    """One result in pagecheck.bench's format from results that each cover some contexts."""
    merged = copy.deepcopy(parts[0])
    merged["configuration"]["contexts"] = list(config.contexts)
    for part in parts[1:]:
        for key in PER_VARIANT_KEYS:
            for variant, by_context in part[key].items():
                merged[key].setdefault(variant, {}).update(by_context)
    return merged


def speedups(result: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """Per context: how many times faster the subject is than each other variant (`vs_<variant>`)."""
    medians = result["medians_us"]
    others = [v for v in result["configuration"]["variants"] if v != MEASURED]
    table: dict[str, dict[str, float | None]] = {}
    for context in (str(c) for c in result["configuration"]["contexts"]):
        measured = medians.get(MEASURED, {}).get(context)
        table[context] = {}
        for other_variant in others:
            other = medians.get(other_variant, {}).get(context)
            table[context][f"vs_{other_variant}"] = other / measured if measured and other else None
    return table


def correctness_verdict(result: dict[str, Any]) -> dict[str, Any]:
    """Every variant ran at every context and its checked output is within the tolerance table.

    `subject_correct` is the subject's part of it: a subject that is wrong is
    still timed, and its rows are marked.
    """
    problems: list[tuple[str, str]] = []
    for variant in result["configuration"]["variants"]:
        for context in (str(c) for c in result["configuration"]["contexts"]):
            message = result["errors"].get(variant, {}).get(context)
            check = result["correctness"].get(variant, {}).get(context)
            if message is not None:
                problems.append((variant, f"{variant} at context {context} failed to run: {message}"))
            elif check is None:
                problems.append((variant, f"{variant} at context {context}: no output was checked"))
            elif check["error"] is not None:
                problems.append((variant, f"{variant} at context {context}: its output could not be compared: {check['error']}"))
            elif not check["passed"]:
                problems.append((variant, (
                    f"{variant} at context {context}: outside tolerance of the float64 reference "
                    f"({check['num_mismatches']} elements outside, {check['num_nonfinite']} NaN/inf; max abs error "
                    f"{check['max_abs_error']:.3g}, {check['allowance_used']:.3g} of the allowance used)"
                )))  # fmt: skip
    tolerance = TOLERANCES[result["configuration"]["dtype"]]
    return {
        "tolerance": {"atol": tolerance.atol, "rtol": tolerance.rtol},
        "correct": not problems,
        "subject_correct": not any(variant == MEASURED for variant, _ in problems),
        "problems": [text for _, text in problems],
    }


def run_bench_report(config: BenchConfig, progress: Progress | None = None) -> dict[str, Any]:
    """pagecheck.bench's result for `config`, plus speedups and the correctness verdict. An interrupt raises
    PartialRun with the result over the contexts that finished (the configuration lists those)."""
    parts = []
    try:
        for index, context in enumerate(config.contexts):
            parts.append(run_bench(replace(config, contexts=(context,))))
            if progress is not None:
                progress(index + 1, len(config.contexts), context)
    except KeyboardInterrupt:
        if not parts:
            raise
        finished = replace(config, contexts=config.contexts[: len(parts)])
        raise PartialRun(_verdict(merge_results(parts, finished)), len(parts), len(config.contexts), "contexts") from None
    return _verdict(merge_results(parts, config))


def _verdict(result: dict[str, Any]) -> dict[str, Any]:
    result["speedups"] = speedups(result)
    result.update(correctness_verdict(result))
    return result
