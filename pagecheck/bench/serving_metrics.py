"""What one serving run measured, from the scheduler's per-step records.

Throughputs divide tokens by the seconds of the phase that produced them
(prefill chunks, decode steps) or by the run's wall time (output tokens,
requests). KV bytes: `peak_kv_storage_bytes` is the largest K/V storage held
after any step (pools, or dense buffers); `peak_kv_bytes` adds the step's
transient dense copies of one layer (repacked or gathered K/V, which live only
while that layer attends; a step's prefill and decode copies are added
together, so this is an upper bound). Copy bytes count every K/V byte copied to build
attention inputs (repack, gather) or to grow storage (growth). Tail waste is
the share of held token slots that held no token, over all steps.
`decode_steps_by_company` splits the decode steps into those that ran alone
and those that shared their scheduler step with a prefill chunk (whose wait
for the device work queued before the chunk counts as decode time), each with
its count, median milliseconds and mean batch, and the medians of a step's
parts: building its graph, MLX's submit, and waiting for sampled tokens.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pagecheck.serving.batch import GenerationResult


def _percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def _rate(count: int, seconds: float) -> float | None:
    return count / seconds if seconds > 0 else None


def _decode_steps(steps: list[Any]) -> dict[str, Any]:
    decoding = [step for step in steps if step.decode_batch]

    def median_ms(part: str) -> float | None:
        return _percentile([1000 * getattr(step, part) for step in decoding], 50)

    return {
        "steps": len(decoding),
        "median_ms": median_ms("decode_seconds"),
        "mean_batch": sum(step.decode_batch for step in decoding) / len(decoding) if decoding else None,
        # Where a step's time goes (medians of each part, so they need not add up to median_ms).
        "median_build_ms": median_ms("decode_build_seconds"),
        "median_submit_ms": median_ms("decode_submit_seconds"),
        "median_wait_ms": median_ms("decode_wait_seconds"),
    }


def serving_metrics(result: GenerationResult, num_layers: int) -> dict[str, Any]:
    steps = result.steps
    if not steps:
        raise ValueError("the run has no steps")
    prefill_tokens = sum(step.prefill_tokens for step in steps)
    prefill_seconds = sum(step.prefill_seconds for step in steps)
    decode_tokens = sum(step.decode_batch for step in steps)
    decode_seconds = sum(step.decode_seconds for step in steps)
    output_tokens = sum(len(tokens) for tokens in result.outputs.values())
    decode_ms = [1000 * step.decode_seconds for step in steps if step.decode_batch]

    transient_per_layer = []
    previous = 0
    for step in steps:
        total = step.traffic.total_bytes
        transient_per_layer.append((total - previous) // num_layers)
        previous = total
    final = steps[-1]
    held_slots = sum(step.usage.held_slots for step in steps)
    held_tokens = sum(step.usage.held_tokens for step in steps)
    copy_bytes = {
        "repack": final.traffic.repack_bytes,
        "gather": final.traffic.gather_bytes,
        "growth": final.usage.growth_copy_bytes,
    }
    copy_bytes["total"] = sum(copy_bytes.values())
    return {
        "steps": len(steps),
        "wall_seconds": result.wall_seconds,
        "prefill_tokens": prefill_tokens,
        "prefill_tokens_per_s": _rate(prefill_tokens, prefill_seconds),
        "decode_tokens": decode_tokens,
        "decode_tokens_per_s": _rate(decode_tokens, decode_seconds),
        "output_tokens": output_tokens,
        "output_tokens_per_s": _rate(output_tokens, result.wall_seconds),
        "requests_per_s": _rate(len(result.outputs), result.wall_seconds),
        "decode_step_ms": {
            "median": _percentile(decode_ms, 50),
            "p95": _percentile(decode_ms, 95),
            "max": max(decode_ms) if decode_ms else None,
        },
        "decode_steps_by_company": {
            "alone": _decode_steps([step for step in steps if not step.prefill_tokens]),
            "beside_prefill": _decode_steps([step for step in steps if step.prefill_tokens]),
        },
        "peak_kv_storage_bytes": max(step.usage.storage_bytes for step in steps),
        "peak_kv_bytes": max(
            step.usage.storage_bytes + transient for step, transient in zip(steps, transient_per_layer)
        ),
        "peak_live_pages": None if final.usage.live_pages is None else max(step.usage.live_pages for step in steps),
        "copy_bytes": copy_bytes,
        "page_reuse_count": final.usage.reused_pages,
        "tail_waste_fraction": 1 - held_tokens / held_slots if held_slots else None,
        "max_concurrent_requests": max(step.admitted for step in steps),
        "mean_concurrent_requests": sum(step.admitted for step in steps) / len(steps),
        "block_table_builds_per_step": final.table_builds / len(steps),
    }
