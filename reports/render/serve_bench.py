"""serve_bench.md: the serving variants side by side, and the KV-budget sweep when there is one."""

from __future__ import annotations

from typing import Any

from pagecheck.bench.serving_run import WARM_UPS
from pagecheck.reports.render.markdown import table

VARIANT_LABELS = {
    "dense": "dense (batch K/V repacked every step)",
    "paged_gather": "paged + dense gather",
    "paged": "paged (direct paged attention)",
}
MIB = 2**20

MAIN_HEADERS = (
    "variant", "prefill tok/s", "decode tok/s", "output tok/s", "req/s", "decode step ms (med / p95 / max)",
    "peak KV MiB", "peak live pages", "copy MiB (repack / gather / growth)", "page reuse", "tail waste",
    "tokens = paged",
)
BUDGET_HEADERS = (
    "KV budget MiB", "variant", "max concurrent", "mean concurrent", "output tok/s", "decode tok/s", "peak KV MiB",
)


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _mib(value: int | float | None) -> str:
    return "-" if value is None else f"{value / MIB:,.1f}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def variant_row(variant: str, entry: dict[str, Any], agreement: float | None) -> list[str]:
    label = VARIANT_LABELS.get(variant, variant)
    if "error" in entry:
        return [label, f"ERROR: {entry['error']}", *["-"] * (len(MAIN_HEADERS) - 2)]
    m = entry["metrics"]
    step = m["decode_step_ms"]
    copies = m["copy_bytes"]
    return [
        label,
        _num(m["prefill_tokens_per_s"]),
        _num(m["decode_tokens_per_s"]),
        _num(m["output_tokens_per_s"]),
        _num(m["requests_per_s"], 3),
        f"{_num(step['median'])} / {_num(step['p95'])} / {_num(step['max'])}",
        _mib(m["peak_kv_bytes"]),
        "-" if m["peak_live_pages"] is None else str(m["peak_live_pages"]),
        f"{_mib(copies['repack'])} / {_mib(copies['gather'])} / {_mib(copies['growth'])}",
        "-" if m["page_reuse_count"] is None else str(m["page_reuse_count"]),
        _share(m["tail_waste_fraction"]),
        _share(agreement),
    ]


def variants_table(document: dict[str, Any]) -> str:
    rows = [
        variant_row(variant, entry, document["tokens_match_paged"].get(variant))
        for variant, entry in document["variants"].items()
    ]
    return table(MAIN_HEADERS, rows, align=["left"] + ["right"] * (len(MAIN_HEADERS) - 1))


def budget_table(rows: list[dict[str, Any]]) -> str:
    body = []
    for row in rows:
        label = VARIANT_LABELS.get(row["variant"], row["variant"])
        if "error" in row:
            body.append([_mib(row["kv_budget_bytes"]), label, f"ERROR: {row['error']}", "-", "-", "-", "-"])
            continue
        body.append([
            _mib(row["kv_budget_bytes"]), label, str(row["max_concurrent_requests"]),
            _num(row["mean_concurrent_requests"], 2), _num(row["output_tokens_per_s"]),
            _num(row["decode_tokens_per_s"]), _mib(row["peak_kv_bytes"]),
        ])
    return table(BUDGET_HEADERS, body, align=["right", "left"] + ["right"] * (len(BUDGET_HEADERS) - 2))


def copy_ratio_lines(document: dict[str, Any]) -> list[str]:
    lines = []
    for variant, ratio in document["copy_ratio_vs_paged"].items():
        if variant != "paged" and ratio is not None:
            lines.append(f"- {VARIANT_LABELS.get(variant, variant)} copies {ratio:,.0f}x the bytes of direct paged attention")
    return lines


def decode_company_lines(document: dict[str, Any]) -> list[str]:
    """Per variant: its decode steps alone and beside a prefill chunk (older records have no split)."""
    lines = []
    for variant, entry in document["variants"].items():
        split = entry.get("metrics", {}).get("decode_steps_by_company")
        if split is None:
            continue
        parts = [
            f"{split[key]['steps']} {label} (median {_num(split[key]['median_ms'])} ms, "
            f"mean batch {_num(split[key]['mean_batch'], 2)})"
            for key, label in (("alone", "alone"), ("beside_prefill", "beside a prefill chunk"))
        ]
        lines.append(f"- {VARIANT_LABELS.get(variant, variant)}: decode steps {parts[0]}; {parts[1]}")
    return lines


# How the variants shared processes; records from before the setting existed say nothing.
ISOLATION_PHRASES = {"process": ", each variant in a worker process of its own (--isolation process)",
                     "shared": ", every variant in one process"}


def _rounds_phrase(rounds: int) -> str:
    if rounds == 1:
        return ""
    return (f", {rounds} timed runs per variant in rounds of alternating order, each variant's row its median "
            "round by decode tok/s")


def round_lines(document: dict[str, Any]) -> list[str]:
    """Per variant run more than once: every round's throughput and step median, in run order."""
    lines = []
    for variant, entry in document["variants"].items():
        rounds = entry.get("rounds")
        if not rounds:
            continue
        parts = [
            f"{_num(r['decode_tokens_per_s'])} / {_num(r['output_tokens_per_s'])} tok/s, step {_num(r['decode_step_ms_median'])} ms"
            for r in rounds
        ]
        lines.append(f"- {VARIANT_LABELS.get(variant, variant)}, each round (decode / output): {'; '.join(parts)}")
    return lines


def interrupted_lines(document: dict[str, Any]) -> list[str]:
    """What an interrupted run kept (serve_bench.json's "interrupted"), above everything else."""
    stopped = document.get("interrupted")
    if stopped is None:
        return []
    where = ("during the KV budget sweep: every variant's run finished, the sweep lists its finished rows"
             if stopped["stage"] == "budget_sweep" else
             "before every variant's runs finished: each row is the runs that finished, a variant with none is left out")
    return [f"**INCOMPLETE: interrupted after {stopped['finished_runs']} of {stopped['planned_runs']} timed runs**, "
            f"{where}.", ""]


def render_serve_bench(document: dict[str, Any]) -> str:
    model = document["model"]
    trace = document["trace"]
    settings = document["settings"]
    lines = [
        "# Serving benchmark",
        "",
        *interrupted_lines(document),
        f"- **Model:** {model['name']} ({model['num_layers']} layers, hidden {model['hidden_size']}, "
        f"{model['num_q_heads']} q / {model['num_kv_heads']} kv heads, head_dim {model['head_dim']}, "
        f"vocab {model['vocab_size']}), random weights seed {document['seed']}, "
        f"{settings['bits']}-bit groups of {settings['group_size']}, activations {settings['dtype']}",
        f"- **Device:** {document['device']}",
        f"- **Trace:** {trace['num_requests']} requests, prompts {min(trace['prompt_lens'])}..{max(trace['prompt_lens'])} "
        f"tokens ({trace['prompt_tokens']} in all), outputs {min(trace['output_lens'])}..{max(trace['output_lens'])} "
        f"({trace['output_tokens']} in all), seed {trace['seed']}, sha256 `{trace['sha256'][:16]}`",
        f"- **Scheduler:** batch {settings['batch_size']}, prefill step {settings['prefill_step']}, "
        f"page size {settings['page_size']}, decode steps "
        f"{'pipelined' if settings.get('overlap', True) else 'read back one by one (--no-overlap)'}, "
        f"warm-up {WARM_UPS[settings.get('warm_up', 'short')]}"
        + _rounds_phrase(settings.get("rounds", 1))
        + ISOLATION_PHRASES.get(settings.get("isolation"), ""),
        f"- **Created:** {document['created']}",
        "",
        variants_table(document),
        "",
        *copy_ratio_lines(document),
        *decode_company_lines(document),
        *round_lines(document),
        "",
        "Copy bytes: K/V copied to build attention inputs (repack, gather) or to grow storage (growth). "
        "Peak KV: storage plus one layer's transient dense K/V. Tail waste: held token slots without a token.",
    ]
    if document.get("budget_sweep"):
        lines += [
            "",
            "## KV budget sweep",
            "",
            "A request is admitted when the worst-case KV bytes of everything admitted, itself included, fit "
            "the budget: stored K/V in every layer plus one layer's dense copy (repack or gather). "
            f"{document['budget_slots']} decode slots, so the budget is what limits concurrency. "
            "Peak KV is measured; paged storage can exceed the budget by the pool's doubling growth.",
            "",
            budget_table(document["budget_sweep"]),
        ]
    return "\n".join(lines) + "\n"
