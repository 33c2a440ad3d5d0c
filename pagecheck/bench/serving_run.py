"""Run serving variants on one trace and collect their metrics (the measuring half of serve-bench).

Every variant replays the same trace with the same weights; before its timed
run it serves a warm-up so one-time costs (allocator growth, first kernel
calls) stay out of the numbers: two short requests, or (`warm_up="trace"`) the
whole trace once, which on a GPU also compiles every kernel variant the trace's
shapes need (the attention launch plan changes with batch and context, and
each new variant is a JIT compile of a second or more).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import mlx.core as mx

from pagecheck.bench.partial import PartialRun
from pagecheck.serving.batch import batch_generate
from pagecheck.serving.qwen3 import Qwen3Model
from pagecheck.serving.qwen3_weights import Qwen3Weights
from pagecheck.serving.request import Request
from pagecheck.bench.serving_metrics import serving_metrics
from pagecheck.bench.serving_trace import ServeTrace

WARMUP_PROMPT_LEN = 24
WARMUP_OUTPUT_LEN = 3


@dataclass(frozen=True)
class ServeSettings:
    batch_size: int
    prefill_step: int
    page_size: int
    kv_budget_bytes: int | None = None
    overlap: bool = True  # pipelined decode steps (serving/batch.py)
    warm_up: str = "short"  # "short": two short requests; "trace": the whole trace once, untimed


# The warm-ups by name, each with the words the progress lines and the report use for it.
WARM_UPS = {"short": "two short requests", "trace": "the whole trace untimed"}


def _warm_up(model: Qwen3Model, settings: ServeSettings, trace: ServeTrace) -> None:
    if settings.warm_up not in WARM_UPS:
        raise ValueError(f"warm_up={settings.warm_up!r} is not one of {tuple(WARM_UPS)}")
    if settings.warm_up == "trace":
        requests = trace.fresh_requests()
    else:
        requests = [Request([token] * WARMUP_PROMPT_LEN, WARMUP_OUTPUT_LEN, token) for token in (1, 2)]
    batch_generate(
        model, requests, batch_size=settings.batch_size, prefill_step=settings.prefill_step,
        page_size=settings.page_size, overlap=settings.overlap,
    )


def empty_buffer_cache() -> None:
    """Give MLX's cached buffers back before a run, so that each run starts with the same allocator state.

    MLX keeps freed buffers for reuse up to its cache limit (by default its memory limit); once the cache
    is full, an allocation first frees cached buffers, which on CUDA waits for the device. On the H200 the
    dense and paged + gather variants left over 100 GB cached, and the variant after them ran its decode
    steps at about 15 ms against 8-10 ms alone (ext/kernels/NOTES.md v16; the allocator cause is inferred
    from the cache sizes, not traced). Python's collector runs first, so arrays held only by reference
    cycles are freed too. On CUDA the buffers of finished work reach the cache from MLX's completion
    thread, after the work is done, so the default stream is synchronized before the cache is emptied:
    otherwise they can land in it after mx.clear_cache."""
    mx.synchronize()
    gc.collect()
    mx.clear_cache()


def run_variant(weights: Qwen3Weights, variant: str, trace: ServeTrace, settings: ServeSettings) -> dict[str, Any]:
    """Metrics of one variant on the trace, plus its greedy tokens; an exception becomes an 'error' entry.
    The run starts from an empty buffer cache (empty_buffer_cache)."""
    return serve_variant(weights, variant, trace, settings, {})


def serve_variant(
    weights: Qwen3Weights, variant: str, trace: ServeTrace, settings: ServeSettings, models: dict[str, Qwen3Model]
) -> dict[str, Any]:
    """One timed run of `variant` from an empty buffer cache, as an entry (metrics and tokens, or 'error').
    The variant's model comes from `models`; one not there yet is made, warmed up and kept there."""
    empty_buffer_cache()
    try:
        if variant not in models:
            models[variant] = Qwen3Model(weights, variant)
            _warm_up(models[variant], settings, trace)
        return _timed_run(models[variant], trace, settings)
    except Exception as exc:  # one failing variant must not hide the others' numbers
        return {"error": f"{type(exc).__name__}: {exc}"}


def _timed_run(model: Qwen3Model, trace: ServeTrace, settings: ServeSettings) -> dict[str, Any]:
    result = batch_generate(
        model, trace.fresh_requests(), batch_size=settings.batch_size, prefill_step=settings.prefill_step,
        page_size=settings.page_size, kv_budget_bytes=settings.kv_budget_bytes, overlap=settings.overlap,
    )
    return {"metrics": serving_metrics(result, model.config.num_layers), "outputs": result.outputs}


# What each round of a variant keeps besides the headline run's full metrics: enough to see the spread.
ROUND_FIELDS = ("prefill_tokens_per_s", "decode_tokens_per_s", "output_tokens_per_s", "wall_seconds")


def round_orders(variants: tuple[str, ...], rounds: int) -> list[tuple[str, ...]]:
    """The variant order of each round: as given, then reversed, alternating, so that over two rounds no
    variant always runs after the same others."""
    return [variants if index % 2 == 0 else tuple(reversed(variants)) for index in range(rounds)]


def median_round(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The round whose decode tok/s is the median (the lower middle one for an even count)."""
    ranked = sorted(entries, key=lambda entry: entry["metrics"]["decode_tokens_per_s"] or 0.0)
    return ranked[(len(ranked) - 1) // 2]


def run_variants(
    weights: Qwen3Weights,
    variants: tuple[str, ...],
    trace: ServeTrace,
    settings: ServeSettings,
    report: Callable[[str, dict[str, Any]], None] | None = None,
    starting: Callable[[str], None] | None = None,
    rounds: int = 1,
) -> dict[str, dict[str, Any]]:
    """Each variant's entry (run_rounds), every variant served in this process: a variant's model is made and
    warmed up once, before its first run, and kept for its later rounds. Every run (a first run's warm-up
    included) starts from an empty buffer cache (empty_buffer_cache)."""
    models: dict[str, Qwen3Model] = {}
    return run_rounds(variants, lambda variant: serve_variant(weights, variant, trace, settings, models), report,
                      starting, rounds)


def run_rounds(
    variants: tuple[str, ...],
    serve: Callable[[str], dict[str, Any]],
    report: Callable[[str, dict[str, Any]], None] | None = None,
    starting: Callable[[str], None] | None = None,
    rounds: int = 1,
) -> dict[str, dict[str, Any]]:
    """Each variant's entry: its metrics and greedy tokens, or an 'error'.

    `rounds` timed runs per variant, each `serve(variant)`, in rounds that alternate the order
    (round_orders). The entry is the median round's (median_round), and with more than one finished round
    it lists every round's ROUND_FIELDS under "rounds", in run order. `starting(variant)` comes before each
    run, `report(variant, entry)` after it. A variant that fails is not run again. An interrupt raises
    PartialRun with the entries of the variants that have a finished run.
    """
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds <= 0:
        raise ValueError(f"rounds must be a positive int, got {rounds!r}")
    done: dict[str, list[dict[str, Any]]] = {variant: [] for variant in variants}
    failed: dict[str, dict[str, Any]] = {}
    try:
        for order in round_orders(variants, rounds):
            for variant in order:
                if variant in failed:
                    continue
                if starting is not None:
                    starting(variant)
                entry = serve(variant)
                if "error" in entry:
                    failed[variant] = entry
                else:
                    done[variant].append(entry)
                if report is not None:
                    report(variant, entry)
    except KeyboardInterrupt:
        finished = sum(len(entries) for entries in done.values()) + len(failed)
        partial = _round_entries([v for v in variants if v in failed or done[v]], done, failed)
        raise PartialRun(partial, finished, rounds * len(variants)) from None
    return _round_entries(list(variants), done, failed)


def _round_entries(
    variants: list[str], done: dict[str, list[dict[str, Any]]], failed: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """run_rounds' entry of each variant given, from its finished runs (`done`) or its error (`failed`)."""
    runs = {}
    for variant in variants:
        if variant in failed:
            runs[variant] = failed[variant]
            continue
        runs[variant] = dict(median_round(done[variant]))
        if len(done[variant]) > 1:
            runs[variant]["rounds"] = [
                {field: entry["metrics"][field] for field in ROUND_FIELDS}
                | {"decode_step_ms_median": entry["metrics"]["decode_step_ms"]["median"]}
                for entry in done[variant]
            ]
    return runs


def _against_baseline(
    runs: dict[str, dict[str, Any]],
    baseline: str,
    field: str,
    measure: Callable[[Any, Any], float | None],
) -> dict[str, float | None]:
    """measure(variant's field, baseline's field) per variant; None where either run has no such field."""
    base = runs.get(baseline, {}).get(field)
    return {
        variant: None if base is None or run.get(field) is None else measure(run[field], base)
        for variant, run in runs.items()
    }


def token_agreement(runs: dict[str, dict[str, Any]], baseline: str) -> dict[str, float | None]:
    """Per variant: the share of requests whose greedy tokens equal the baseline variant's."""
    return _against_baseline(
        runs, baseline, "outputs", lambda mine, base: sum(mine[rid] == tokens for rid, tokens in base.items()) / len(base)
    )


def copy_ratios(runs: dict[str, dict[str, Any]], baseline: str) -> dict[str, float | None]:
    """Per variant: its total copy bytes divided by the baseline's (None where the baseline copied nothing)."""

    def ratio(mine: dict[str, Any], base: dict[str, Any]) -> float | None:
        base_total = base["copy_bytes"]["total"]
        return mine["copy_bytes"]["total"] / base_total if base_total else None

    return _against_baseline(runs, baseline, "metrics", ratio)


def run_budget_sweep(
    weights: Qwen3Weights,
    variants: tuple[str, ...],
    trace: ServeTrace,
    budgets: tuple[int, ...],
    settings: ServeSettings,
    report: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """For each KV byte budget and variant: how many requests ran at once, and the throughput reached.

    `settings.batch_size` is the slot count, set high so that the budget, not
    the slots, limits admission. An interrupt raises PartialRun with the finished rows.
    """
    rows: list[dict[str, Any]] = []
    try:
        _sweep(weights, variants, trace, budgets, settings, report, rows)
    except KeyboardInterrupt:
        raise PartialRun(rows, len(rows), len(budgets) * len(variants)) from None
    return rows


def _sweep(
    weights: Qwen3Weights,
    variants: tuple[str, ...],
    trace: ServeTrace,
    budgets: tuple[int, ...],
    settings: ServeSettings,
    report: Callable[[dict[str, Any]], None] | None,
    rows: list[dict[str, Any]],
) -> None:
    """run_budget_sweep's runs, each row appended to `rows` as it finishes."""
    for budget in budgets:
        for variant in variants:
            run = run_variant(weights, variant, trace, replace(settings, kv_budget_bytes=budget))
            row: dict[str, Any] = {"kv_budget_bytes": budget, "variant": variant}
            if "error" in run:
                row["error"] = run["error"]
            else:
                metrics = run["metrics"]
                row.update({
                    key: metrics[key]
                    for key in (
                        "max_concurrent_requests", "mean_concurrent_requests", "output_tokens_per_s",
                        "decode_tokens_per_s", "requests_per_s", "peak_kv_bytes", "peak_kv_storage_bytes",
                        "wall_seconds",
                    )
                })
            rows.append(row)
            if report is not None:
                report(row)
