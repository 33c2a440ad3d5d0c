"""Comparing a benchmark run with an earlier one: the ratio per shape, and whether it is beyond the noise.

For each variant and context measured in both runs the ratio is this run's
median over the earlier run's median (above 1: slower now). The noise of a
run at one point is the interquartile range (IQR) of its per-process medians.
A change is beyond the noise when the two runs' IQRs do not overlap: this
run's first quartile above the earlier third quartile (slower), or this
run's third quartile below the earlier first quartile (faster). Equivalently,
the ratio band [q1_now / q3_before, q3_now / q1_before] excludes 1. With
fewer than MIN_PROCESSES processes in either run an IQR measures nothing, so
such a point is reported as "noise unknown" and never flagged. The rule
sees only the noise within each run: a machine whose load changed between
the two runs shifts every point, and that shows as a change.

Spreads are recomputed from each run's `samples`, so a bench.json written
before spreads were recorded compares as well as a new one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pagecheck.bench.attention import process_spread

# Fewest fresh processes per point for its interquartile range to stand for the noise.
MIN_PROCESSES = 3
# Configuration fields that make two runs measure different things when they differ.
SHAPE_FIELDS = ("device", "batch", "num_q_heads", "num_kv_heads", "num_queries", "head_dim", "dtype", "page_size", "subject")
CHANGES = ("slower", "faster", "within noise", "noise unknown")


def change_of(now: dict[str, Any], before: dict[str, Any]) -> str:
    """One of CHANGES for two spreads (process_spread's dicts) at the same point."""
    if now["processes"] < MIN_PROCESSES or before["processes"] < MIN_PROCESSES:
        return "noise unknown"
    if now["q1"] > before["q3"]:
        return "slower"
    if now["q3"] < before["q1"]:
        return "faster"
    return "within noise"


def compare_runs(current: dict[str, Any], previous: dict[str, Any], previous_path: Path) -> dict[str, Any]:
    """The `comparison` part of bench.json: one row per (context, variant) both runs measured."""
    rows: list[dict[str, Any]] = []
    unmatched: list[str] = []
    contexts = [str(c) for c in current["configuration"]["contexts"]]
    for context in contexts:
        for variant in current["configuration"]["variants"]:
            now = process_spread(current["samples"].get(variant, {}).get(context, []))
            before = process_spread(previous.get("samples", {}).get(variant, {}).get(context, []))
            if now is None or before is None:
                unmatched.append(f"{variant} at {context}")
                continue
            rows.append({
                "context": int(context),
                "variant": variant,
                "previous_median_us": before["median"],
                "current_median_us": now["median"],
                "ratio": now["median"] / before["median"],
                "ratio_low": now["q1"] / before["q3"],
                "ratio_high": now["q3"] / before["q1"],
                "processes": [before["processes"], now["processes"]],
                "change": change_of(now, before),
            })  # fmt: skip
    before_config = previous.get("configuration", {})
    differences = [
        f"{name}: {before_config.get(name)!r} before, {current['configuration'][name]!r} now"
        for name in SHAPE_FIELDS
        if before_config.get(name) != current["configuration"].get(name)
    ]
    return {
        "previous": str(previous_path),
        "previous_created": previous.get("created"),
        "rule": f"IQRs of the per-process medians do not overlap; needs {MIN_PROCESSES} processes per point in both runs",
        "differences": differences,
        "rows": rows,
        "unmatched": unmatched,
        "beyond_noise": sum(1 for row in rows if row["change"] in ("slower", "faster")),
    }
