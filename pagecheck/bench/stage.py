"""The operator benchmark as a report: pagecheck.bench run one context at a time, plus a verdict.

pagecheck.bench does the measuring (fresh processes, alternating variant
order); this module runs it per context so progress can be shown, merges
the parts into one result with the same keys, and adds what a report needs:
speedups of direct paged attention, and whether every variant's output is
within the tolerance table's atol of the float64 reference.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any, Callable

from pagecheck.bench.attention import BenchConfig, run_bench
from pagecheck.reference.tolerance import TOLERANCES

# Benchmark keys indexed [variant][context], as pagecheck.bench writes them.
PER_VARIANT_KEYS = ("samples", "medians_us", "min_us", "max_us", "errors")
BASELINES = ("dense_gather", "mlx_sdpa")

Progress = Callable[[int, int, int], None]

FULL_CONFIG = BenchConfig(contexts=(128, 256, 512, 1024, 2048, 4096), repeats=3, warmup=5, iterations=30)
QUICK_CONFIG = BenchConfig(contexts=(128, 1024), repeats=1, warmup=3, iterations=10)


def merge_results(parts: list[dict[str, Any]], config: BenchConfig) -> dict[str, Any]:
    """One result in pagecheck.bench's format from results that each cover some contexts."""
    merged = copy.deepcopy(parts[0])
    merged["configuration"]["contexts"] = list(config.contexts)
    for part in parts[1:]:
        for key in PER_VARIANT_KEYS:
            for variant, by_context in part[key].items():
                merged[key].setdefault(variant, {}).update(by_context)
        merged["correctness"]["max_abs_error_vs_float64"].update(part["correctness"]["max_abs_error_vs_float64"])
    return merged


def speedups(result: dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """Per context: how many times faster direct paged attention is than each baseline."""
    medians = result["medians_us"]
    table: dict[str, dict[str, float | None]] = {}
    for context in (str(c) for c in result["configuration"]["contexts"]):
        paged = medians.get("paged", {}).get(context)
        table[context] = {}
        for baseline in BASELINES:
            other = medians.get(baseline, {}).get(context)
            table[context][f"paged_vs_{baseline}"] = other / paged if paged and other else None
    return table


def correctness_verdict(result: dict[str, Any]) -> dict[str, Any]:
    """Every variant ran at every context and its max abs error is within the dtype's atol.

    Within atol is sufficient for the elementwise rule atol + rtol * |want|,
    so a pass here is a pass there; the tolerance sweep gives the exact verdict.
    """
    dtype = result["configuration"]["dtype"]
    atol = TOLERANCES[dtype].atol
    problems = []
    for context, by_variant in result["correctness"]["max_abs_error_vs_float64"].items():
        for variant, error in by_variant.items():
            if isinstance(error, str):
                problems.append(f"{variant} at context {context} raised {error}")
            elif not error <= atol:
                problems.append(f"{variant} at context {context}: max abs error {error:.3g} > atol {atol:.3g}")
    for variant, by_context in result["errors"].items():
        for context, message in by_context.items():
            problems.append(f"{variant} at context {context} failed to run: {message}")
    return {"atol": atol, "correct": not problems, "problems": problems}


def run_bench_report(config: BenchConfig, progress: Progress | None = None) -> dict[str, Any]:
    """pagecheck.bench's result for `config`, plus speedups and the correctness verdict."""
    parts = []
    for index, context in enumerate(config.contexts):
        parts.append(run_bench(replace(config, contexts=(context,))))
        if progress is not None:
            progress(index + 1, len(config.contexts), context)
    result = merge_results(parts, config)
    result["speedups"] = speedups(result)
    result.update(correctness_verdict(result))
    return result
