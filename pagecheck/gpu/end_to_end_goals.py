"""Issue 21's goals, judged from one GPU run's three documents, ratios side by side.

Reads, from one directory: percall.json (pagecheck.gpu.percall), bench_gpu.json
(pagecheck.gpu.bench) and serve_bench.json (pagecheck serve-bench); writes
end_to_end.json and end_to_end.md there and prints the table. A goal whose
numbers are missing is "not measured", never met:

- per call: impl.paged_attention's wall per call of back-to-back calls at most
  1.0x MLX SDPA's on pre-gathered K/V, at every shape of bench_percall;
- kernels: B 1 x 16384 decode at most MLX SDPA's kernel time, and the B >= 16
  decode shapes (context >= 1024) below MLX SDPA's kernel time;
- prefill: the op's prefill kernel at most 1.2x cuDNN's at (1, 512, 4096) and
  (4, 2048, 8192);
- serving: direct paged the fastest variant in decode and output tok/s, at
  least 1.3x paged + gather in both, decode step median at most 8 ms;
- verification, from scripts/gpu_verify.sh LOGDIRs given with --verify (runs
  of their own: with the build above they do not fit one device call; give
  --verify again for steps run in separate calls, the last LOGDIR holding a
  file is read): every check of the invariants suite on the GPU passes
  (invariants.log), every cell of the GPU tolerance sweep
  (tolerance/tolerance.json) and every kernel harness case (harness.json,
  written only by a run that finished).

A run in which the op's warpgroup prefill did not compile (the op then runs its
fallback prefill for the rest of the process and says so once on stderr) is not
a run of the build: if any step's log in DIR or a LOGDIR holds that line, no
goal is judged, and the table names the logs.

    python -m pagecheck.gpu.end_to_end_goals DIR [--verify LOGDIR ...]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from pagecheck.gpu.goals import BATCHED_DECODE_SHAPES, PAGED_VARIANTS, PERCALL_SHAPES, SINGLE_SHAPE

PERCALL_RATIO = 1.0
PREFILL_CUDNN_RATIO = 1.2
PREFILL_SHAPES = ((1, 512, 4096), (4, 2048, 8192))
SERVE_SPEEDUP = 1.3
SERVE_STEP_MS = 8.0
SERVE_PAGED, SERVE_GATHER = "paged", "paged_gather"
# The serving goal's run: qwen3-0.6b (all 28 layers) on the GPU, 16 requests with prompts of 1k-4k tokens,
# batch 8.
SERVE_MODEL, SERVE_LAYERS, SERVE_REQUESTS, SERVE_PROMPTS, SERVE_BATCH = "qwen3-0.6b", 28, 16, (1024, 4096), 8
# The line the op prints once when the warpgroup prefill does not compile (ext/src/common/gpu_dispatch.cpp).
FALLBACK_MARK = "the warpgroup prefill kernel did not compile"


def verdict(goal: str, shape: str, ours: float | None, theirs: float | None, limit: float,
            unit: str, lower_is_better: bool = True) -> dict[str, Any]:
    """A goal on ours / theirs (lower_is_better: ratio <= limit; else ratio >= limit)."""
    ratio = None if ours is None or theirs is None or not theirs else ours / theirs
    met = None if ratio is None else (ratio <= limit if lower_is_better else ratio >= limit)
    return {"goal": goal, "shape": shape, "ours": ours, "baseline": theirs, "unit": unit, "ratio": ratio,
            "limit": limit, "met": met}


def withdrawn(goals: list[dict[str, Any]], why: str | None = None) -> list[dict[str, Any]]:
    """The goals with their verdicts withdrawn ("not measured"), and `why` noted on each where given."""
    return [{**g, "met": None, **({"note": why} if why else {})} for g in goals]


def percall_goals(document: dict[str, Any] | None) -> list[dict[str, Any]]:
    """One goal per shape of PERCALL_SHAPES; a shape the run left out is not measured, and a run off the GPU
    (percall --cpu) judges none."""
    found = {} if document is None else {(g["batch"], g["context"]): g for g in document["goals"]}
    goals = []
    for batch, context in PERCALL_SHAPES:
        g = found.get((batch, context), {})
        goals.append(verdict("wall per call <= 1.0x MLX SDPA", f"B {batch} x {context}", g.get("paged_us"),
                             g.get("sdpa_us"), PERCALL_RATIO, "us"))
    if document is not None and document.get("device") != "gpu":
        return withdrawn(goals, f"percall.json is from device {document.get('device')!r}, not the GPU")
    return goals


def _kernel_rows(document: dict[str, Any]) -> dict[tuple[str, int, int, int], dict[str, dict[str, Any]]]:
    shapes: dict[tuple[str, int, int, int], dict[str, dict[str, Any]]] = {}
    for row in document["rows"]:
        key = (row["kind"], row["batch"], row["queries"], row["context"])
        shapes.setdefault(key, {})[row["variant"]] = row
    return shapes


def _paged_kernel_us(variants: dict[str, dict[str, Any]]) -> float | None:
    for name in PAGED_VARIANTS:
        if name in variants:
            return variants[name]["kernel_us"]
    return None


def kernel_goals(document: dict[str, Any] | None) -> list[dict[str, Any]]:
    shapes = {} if document is None else _kernel_rows(document)
    batch, context = SINGLE_SHAPE
    variants = shapes.get(("decode", batch, 1, context), {})
    goals = [verdict("B 1 long decode kernel <= MLX SDPA", f"B {batch} x {context}", _paged_kernel_us(variants),
                     variants.get("mlx_sdpa", {}).get("kernel_us"), 1.0, "us")]
    for batch, context in BATCHED_DECODE_SHAPES:
        variants = shapes.get(("decode", batch, 1, context), {})
        goal = verdict("decode kernel ahead of MLX SDPA", f"B {batch} x {context}", _paged_kernel_us(variants),
                       variants.get("mlx_sdpa", {}).get("kernel_us"), 1.0, "us")
        goal["met"] = None if goal["ratio"] is None else goal["ratio"] < 1.0
        goals.append(goal)
    for batch, queries, context in PREFILL_SHAPES:
        variants = shapes.get(("prefill", batch, queries, context), {})
        goals.append(verdict("prefill kernel <= 1.2x cuDNN", f"B {batch}, L {queries}, ctx {context}",
                             _paged_kernel_us(variants), variants.get("torch_cudnn", {}).get("kernel_us"),
                             PREFILL_CUDNN_RATIO, "us"))
    return goals


def serve_mismatches(document: dict[str, Any]) -> list[str]:
    """How a serve_bench.json's run differs from the serving goal's (empty when it is that run)."""
    model, trace = document.get("model", {}), document.get("trace", {})
    prompts = trace.get("prompt_lens") or [0]
    found = {
        "device": (document.get("device"), "gpu"),
        "model": (model.get("name"), SERVE_MODEL),
        "layers": (model.get("num_layers"), SERVE_LAYERS),
        "requests": (trace.get("num_requests"), SERVE_REQUESTS),
        "batch": (document.get("settings", {}).get("batch_size"), SERVE_BATCH),
    }
    mismatches = [f"{name} {ours} (the goal's: {goal})" for name, (ours, goal) in found.items() if ours != goal]
    low, high = SERVE_PROMPTS
    if not low <= min(prompts) <= max(prompts) <= high:
        mismatches.append(f"prompts {min(prompts)}..{max(prompts)} tokens (the goal's: within {low}..{high})")
    return mismatches


def serving_goals(document: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The serving goals from serve-bench's record; a run other than the goal's (serve_mismatches) judges none."""
    mismatches = [] if document is None else serve_mismatches(document)
    if mismatches:
        return withdrawn(serving_goals(None), "serve_bench.json is not the goal's run: " + ", ".join(mismatches))
    variants = {} if document is None else document.get("variants", {})
    metrics = {name: entry.get("metrics") for name, entry in variants.items() if "metrics" in entry}
    paged, gather = metrics.get(SERVE_PAGED), metrics.get(SERVE_GATHER)
    goals = []
    for field, label in (("decode_tokens_per_s", "decode tok/s"), ("output_tokens_per_s", "output tok/s")):
        ours = paged and paged[field]
        goals.append(verdict(f"paged {label} >= 1.3x paged + gather", "serve-bench", ours, gather and gather[field],
                             SERVE_SPEEDUP, "tok/s", lower_is_better=False))
        others = [m[field] for name, m in metrics.items() if name != SERVE_PAGED and m[field] is not None]
        fastest = None if ours is None or not others else ours / max(others)
        goals.append({"goal": f"paged the fastest variant in {label}", "shape": "serve-bench", "ours": ours,
                      "baseline": max(others) if others else None, "unit": "tok/s", "ratio": fastest,
                      "limit": 1.0, "met": None if fastest is None else fastest >= 1.0})
    step = paged and paged["decode_step_ms"]["median"]
    goals.append(verdict("decode step median <= 8 ms", "serve-bench", step, SERVE_STEP_MS, 1.0, "ms"))
    return goals


def _passed_of(passed: int | None, total: int | None, goal: str, unit: str) -> dict[str, Any]:
    """All of `total` passed: passed / total >= 1 (not measured without both)."""
    return verdict(goal, "gpu_verify", passed, total, 1.0, unit, lower_is_better=False)


def invariants_counts(log: str) -> tuple[int, int] | None:
    """(passed, passed + failed + errors) from pytest's closing summary line, or None without one."""
    summaries = [line for line in log.splitlines()
                 if re.search(r" in [\d.]+s\b", line) and re.search(r"\d+ (passed|failed|errors?)\b", line)]
    if not summaries:
        return None
    counts = {word: int(number) for number, word in re.findall(r"(\d+) (passed|failed|errors?)", summaries[-1])}
    passed = counts.get("passed", 0)
    return passed, passed + counts.get("failed", 0) + counts.get("error", 0) + counts.get("errors", 0)


def _last_holding(folders: list[Path], name: str) -> Path | None:
    """The path `name` in the last of `folders` that has it."""
    found = [folder / name for folder in folders if (folder / name).is_file()]
    return found[-1] if found else None


def verification_goals(folders: list[Path]) -> list[dict[str, Any]]:
    log = _last_holding(folders, "invariants.log")
    invariants = invariants_counts(log.read_text()) if log else None
    tolerance_path = _last_holding(folders, "tolerance/tolerance.json")
    tolerance = load(tolerance_path) if tolerance_path else None
    if tolerance is not None and tolerance.get("device") != "gpu":
        tolerance = None
    harness_path = _last_holding(folders, "harness.json")
    harness = load(harness_path) if harness_path else None
    return [
        _passed_of(*(invariants or (None, None)), "invariants suite passes on the GPU", "checks"),
        _passed_of(tolerance and tolerance["totals"]["passed"], tolerance and tolerance["totals"]["rows"],
                   "tolerance sweep passes on the GPU", "cells"),
        _passed_of(harness and sum(bool(o["passed"]) for o in harness), harness and len(harness),
                   "kernel harness passes on the GPU", "cases"),
    ]


def fallback_logs(folders: list[Path]) -> list[Path]:
    """The step logs (*.log, one level deep) in which the op fell back from the warpgroup prefill."""
    found = []
    for folder in folders:
        for log in sorted(folder.glob("*.log")):
            if FALLBACK_MARK in log.read_text(errors="replace"):
                found.append(log)
    return found


def render(goals: list[dict[str, Any]], fallbacks: list[Path] | None = None) -> str:
    def number(value: float | None) -> str:
        return "-" if value is None else f"{value:,.1f}"

    lines = ["| goal | shape | ours | baseline | ratio | limit | verdict |",
             "| --- | --- | ---: | ---: | ---: | ---: | --- |"]
    for g in goals:
        ratio = "-" if g["ratio"] is None else f"{g['ratio']:.2f}"
        met = {True: "met", False: "missed", None: "not measured"}[g["met"]]
        lines.append(f"| {g['goal']} | {g['shape']} | {number(g['ours'])} {g['unit']} | {number(g['baseline'])} "
                     f"{g['unit']} | {ratio} | {g['limit']} | {met} |")
    met = sum(g["met"] is True for g in goals)
    lines += ["", f"{met} of {len(goals)} goals met."]
    notes = list(dict.fromkeys(g["note"] for g in goals if g.get("note")))
    lines += [f"Not judged: {note}." for note in notes]
    if fallbacks:
        lines += ["", "No goal is judged: the warpgroup prefill did not compile, so the op ran its fallback "
                      "prefill in " + ", ".join(str(log) for log in fallbacks) + "."]
    return "\n".join(lines) + "\n"


def load(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="gpu_end_to_end.sh's OUTDIR")
    parser.add_argument("--verify", type=Path, action="append", default=[],
                        help="gpu_verify.sh's LOGDIR for the same build (repeatable)")
    args = parser.parse_args(argv)
    folder = args.folder
    if not folder.is_dir():
        parser.error(f"{folder} is not a directory")
    for logdir in args.verify:
        if not logdir.is_dir():
            parser.error(f"--verify {logdir} is not a directory")
    goals = (percall_goals(load(folder / "percall.json")) + kernel_goals(load(folder / "bench_gpu.json"))
             + serving_goals(load(folder / "serve" / "serve_bench.json")) + verification_goals(args.verify))
    fallbacks = fallback_logs([folder, *args.verify])
    if fallbacks:
        goals = withdrawn(goals)  # render names the logs
    (folder / "end_to_end.json").write_text(json.dumps(
        {"goals": goals, "prefill_fallback_logs": [str(log) for log in fallbacks]}, indent=1))
    markdown = render(goals, fallbacks)
    (folder / "end_to_end.md").write_text(markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
