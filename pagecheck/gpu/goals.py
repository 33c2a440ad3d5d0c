"""The GPU decode speed goals, judged from the rows of a GPU kernel benchmark.

Speed is reported, never asserted in a test: the goals are verdicts in the
bench_gpu document and page, computed from whatever rows the run measured.
A goal whose shape or baseline was not measured gets `met: None`.

- Against MLX SDPA: at every decode shape with B >= 16 and context >= 1024,
  the paged op's kernel time is below MLX SDPA's on K/V gathered beforehand.
- Against cuDNN: at (64, 4096) and (16, 16384) the paged op reads K/V at
  least 90% as fast as PyTorch's cuDNN SDPA reads dense K/V.
- Long single request: at (1, 16384) the paged op reads at least 1.5 TB/s.
"""

from __future__ import annotations

from typing import Any

# Issue 21's shapes (B, context): the wall-per-call goal's five, and the six batched decode shapes whose
# kernels must stay ahead of MLX SDPA's.
PERCALL_SHAPES = ((1, 16384), (16, 1024), (16, 16384), (64, 1024), (64, 4096))
BATCHED_DECODE_SHAPES = ((16, 1024), (16, 4096), (16, 16384), (64, 1024), (64, 4096), (64, 16384))
CUDNN_SHAPES = ((64, 4096), (16, 16384))
CUDNN_FRACTION = 0.9
SINGLE_SHAPE = (1, 16384)
SINGLE_TB_PER_S = 1.5
# The C++ op is the product; the Python launcher's automatic row stands in when the op was left out.
PAGED_VARIANTS = ("paged[ext op]", "paged")


def _decode_rows(rows: list[dict[str, Any]]) -> dict[tuple[int, int], dict[str, dict[str, Any]]]:
    shapes: dict[tuple[int, int], dict[str, dict[str, Any]]] = {}
    for row in rows:
        if row["kind"] == "decode":
            shapes.setdefault((row["batch"], row["context"]), {})[row["variant"]] = row
    return shapes


def _paged(variants: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    return next((variants[name] for name in PAGED_VARIANTS if name in variants), None)


def evaluate_goals(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One verdict per goal and shape: {"goal", "batch", "context", "paged", "baseline", "measured", "met"}."""
    shapes = _decode_rows(rows)
    goals: list[dict[str, Any]] = []

    for (batch, context), variants in sorted(shapes.items()):
        if batch < 16 or context < 1024:
            continue
        paged, sdpa = _paged(variants), variants.get("mlx_sdpa")
        met = None if paged is None or sdpa is None else paged["kernel_us"] < sdpa["kernel_us"]
        goals.append({
            "goal": "faster than MLX SDPA", "batch": batch, "context": context,
            "paged": paged and paged["kernel_us"], "baseline": sdpa and sdpa["kernel_us"],
            "measured": None if met is None else f"{paged['kernel_us']:.1f} us vs {sdpa['kernel_us']:.1f} us",
            "met": met,
        })  # fmt: skip

    for batch, context in CUDNN_SHAPES:
        variants = shapes.get((batch, context), {})
        paged, cudnn = _paged(variants), variants.get("torch_cudnn")
        fraction = None if paged is None or cudnn is None else paged["tb_per_s"] / cudnn["tb_per_s"]
        goals.append({
            "goal": f"at least {CUDNN_FRACTION:.0%} of cuDNN's bandwidth", "batch": batch, "context": context,
            "paged": paged and paged["tb_per_s"], "baseline": cudnn and cudnn["tb_per_s"],
            "measured": None if fraction is None else f"{fraction:.0%} ({paged['tb_per_s']:.2f} vs {cudnn['tb_per_s']:.2f} TB/s)",
            "met": None if fraction is None else fraction >= CUDNN_FRACTION,
        })  # fmt: skip

    paged = _paged(shapes.get(SINGLE_SHAPE, {}))
    goals.append({
        "goal": f"at least {SINGLE_TB_PER_S} TB/s", "batch": SINGLE_SHAPE[0], "context": SINGLE_SHAPE[1],
        "paged": paged and paged["tb_per_s"], "baseline": SINGLE_TB_PER_S,
        "measured": None if paged is None else f"{paged['tb_per_s']:.2f} TB/s",
        "met": None if paged is None else paged["tb_per_s"] >= SINGLE_TB_PER_S,
    })  # fmt: skip
    return goals
