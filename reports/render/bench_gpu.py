"""bench_gpu.md: the GPU kernel benchmark, its speed goals first, then every shape's rows."""

from __future__ import annotations

from typing import Any

from pagecheck.reports.render.markdown import header_lines, inline_code, table


def _number(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _met(met: bool | None) -> str:
    return "not measured" if met is None else "met" if met else "**missed**"


def goal_table(document: dict[str, Any]) -> str:
    """One line per goal and shape, with its verdict (also shown in index.md)."""
    rows = [
        [goal["goal"], f"{goal['batch']} x {goal['context']}", goal["measured"] or "-", _met(goal["met"])]
        for goal in document["goals"]
    ]
    return table(("goal", "B x context", "measured", "verdict"), rows, ("left", "right", "left", "left"))


def shape_rows(document: dict[str, Any]) -> list[list[str]]:
    cudnn = {
        (row["kind"], row["batch"], row["context"]): row["tb_per_s"]
        for row in document["rows"]
        if row["variant"] == "torch_cudnn"
    }
    out = []
    for row in document["rows"]:
        reference = cudnn.get((row["kind"], row["batch"], row["context"]))
        out.append([
            row["kind"], str(row["batch"]), str(row["queries"]), str(row["context"]), inline_code(row["variant"]),
            _number(row["kernel_us"], ".1f"), row.get("clock", "wall"), _number(row.get("chained_us"), ".1f"),
            _number(row["per_call_us"], ".1f"), _number(row["tb_per_s"], ".2f"),
            _number(row["copy_fraction"], ".0%"),
            "-" if reference is None or row["kind"] != "decode" else f"{row['tb_per_s'] / reference:.0%}",
            _number(row["tflop_per_s"], ".1f"),
        ])  # fmt: skip
    return out


def render_bench_gpu(document: dict[str, Any]) -> str:
    config = document["configuration"]
    copy = document["copy_tb_per_s"]
    met = [goal["met"] for goal in document["goals"]]
    lines = [
        "# GPU kernel benchmark",
        "",
        header_lines(document),
        "",
        f"**Speed goals: {sum(m is True for m in met)} of {len(met)} met**"
        + (f", {sum(m is None for m in met)} not measured" if None in met else "")
        + ". Speed is reported here, never asserted by a test.",
        "",
        f"H_q {config['num_q_heads']}, H_kv {config['num_kv_heads']}, D {config['head_dim']}, "
        f"{config['dtype']}, pages of {config['page_size']}. *kernel* is the time per call of many "
        "calls run back to back on the device, rotating among input sets larger than the L2 cache, read "
        "from the GPU's own clock (the time during which at least one of the call's kernels ran, fills "
        "included; kernels that MLX runs side by side count once) where the row's clock says gpu; "
        "*chained* is the wall-clock figure of the same chain (it includes the host's submit time where the "
        "host is slower than the GPU, at small shapes); *per call* is a synchronized single call, host work included. Bandwidth is the K/V bytes "
        "the attention must read over the kernel time. "
        + (f"A device-to-device copy measured {copy:.2f} TB/s (read + write) in the same run."
           if copy is not None else "The copy bandwidth and cuDNN rows need PyTorch, which this run did not use."),
        "",
        "## Goals",
        "",
        goal_table(document),
        "",
        "## Every row",
        "",
        "Variants: `paged[ext op]` is `ext.paged_attention` (the product); `paged...` rows drive the same "
        "kernels from Python (`pagecheck.gpu.kernels`) with the planner's plan, pinned or not; "
        "`gather+mlx_sdpa` gathers the pages and calls MLX SDPA; `mlx_sdpa` and `torch_cudnn` run on dense K/V "
        "gathered beforehand.",
        "",
        table(
            ("kind", "B", "L", "context", "variant", "kernel us", "clock", "chained us", "per call us", "TB/s",
             "of copy", "of cuDNN", "TFLOP/s"),
            shape_rows(document),
            ("left", "right", "right", "right", "left", "right", "left", "right", "right", "right", "right", "right",
             "right"),
        ),
        "",
    ]  # fmt: skip
    return "\n".join(lines)
