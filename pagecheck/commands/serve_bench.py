"""`pagecheck serve-bench`: serve a seeded request trace with a Qwen3 model, three ways, and compare.

Variants: dense (batch K/V repacked every step), paged_gather (paged storage,
pages gathered to dense for attention), paged (direct paged attention). The
same command runs the full model on a GPU (`--device gpu`); on the CPU it
defaults to qwen3-tiny, which keeps the KV geometry of qwen3-0.6b and shrinks
the rest so the whole trace takes minutes. `--kv-budget-bytes` adds a sweep:
under a fixed KV byte budget, how many requests each variant admits at once.
The variants take turns in this process; `--isolation process` serves each in
a fresh worker process of its own instead.

Writes serve_bench.json (the record) and serve_bench.md, and prints the table.
Also runs as `python -m pagecheck.commands.serve_bench`.
"""

from __future__ import annotations

import argparse
import functools
import sys
from dataclasses import asdict, replace
from datetime import datetime, timezone
from typing import Any

import mlx.core as mx

from pagecheck.serving.batch import DEFAULT_BATCH_SIZE, DEFAULT_PREFILL_STEP, MAX_BATCH_SIZE
from pagecheck.serving.model_config import QWEN3_CONFIGS, model_config
from pagecheck.serving.quantized import DEFAULT_BITS, DEFAULT_GROUP_SIZE
from pagecheck.serving.qwen3_attention import ATTENTION_PATHS
from pagecheck.serving.qwen3_weights import random_qwen3_weights
from pagecheck.serving.serving_kv import DEFAULT_PAGE_SIZE, serving_kv_for
from pagecheck.arg_types import int_in, int_list, path_arg, positive_int, seed_int
from pagecheck.commands import options
from pagecheck.device import DeviceUnavailable, use_device
from pagecheck.environment import collect_environment
from pagecheck.exit_codes import ExitCode
from pagecheck.reports.render.serve_bench import render_serve_bench
from pagecheck.reports.document import SCHEMA_VERSION, default_report_dir, write_json
from pagecheck.bench.partial import PartialRun
from pagecheck.bench.serving_processes import ServeSpec, run_variants_in_processes
from pagecheck.bench.serving_run import (
    WARM_UPS,
    ServeSettings,
    copy_ratios,
    run_budget_sweep,
    run_variants,
    token_agreement,
)
from pagecheck.bench.serving_trace import (
    COURSE_NUM_REQUESTS, COURSE_OUTPUT_LENS, COURSE_PROMPT_LENS, MAX_TRACE_REQUESTS, MAX_TRACE_TOKENS, course_trace,
)

NAME = "serve-bench"
KIND = "serve_bench"
DEFAULT_MODEL = {"cpu": "qwen3-tiny", "gpu": "qwen3-4b"}
DEFAULT_DTYPE = {"cpu": "float32", "gpu": "bfloat16"}
DTYPES = ("float32", "bfloat16", "float16")
DEFAULT_SEED = 0
BASELINE = "paged"
ISOLATIONS = ("shared", "process")
FILES = ("serve_bench.json", "serve_bench.md")
# Timed runs per variant: each is a whole trace, so more than this is a mistake (a billion was a MemoryError).
MAX_ROUNDS = 100


def _length_range(text: str) -> tuple[int, int]:
    values = int_list("lengths")(text)
    if len(values) != 2 or values[0] > values[1]:
        raise argparse.ArgumentTypeError(f"{text!r} must be LOW,HIGH with 1 <= LOW <= HIGH")
    return values[0], values[1]


def _variants(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [name for name in names if name not in ATTENTION_PATHS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(f"variants={text!r}: choose from {','.join(ATTENTION_PATHS)}")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        # A variant named twice would be served twice, and one result would replace the other.
        raise argparse.ArgumentTypeError(f"variants={text!r} names {','.join(repeated)} more than once")
    return names


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", choices=sorted(QWEN3_CONFIGS), default=None,
                        help="model dimensions (default: qwen3-tiny on cpu, qwen3-4b on gpu)")
    parser.add_argument("--layers", type=positive_int, default=None, metavar="N",
                        help="keep only the first N layers (default: all layers of --model)")
    parser.add_argument("--variants", type=_variants, default=("dense", "paged_gather", "paged"), metavar="V,V",
                        help="serving variants to run, from dense,paged_gather,paged (default: all three)")
    parser.add_argument("--requests", type=int_in(1, MAX_TRACE_REQUESTS), default=COURSE_NUM_REQUESTS, metavar="N",
                        help=f"requests in the trace, at most {MAX_TRACE_REQUESTS} (default: %(default)s)")
    parser.add_argument("--prompt-lens", type=_length_range, default=COURSE_PROMPT_LENS, metavar="LOW,HIGH",
                        help="prompt lengths, drawn uniformly from LOW..HIGH (default: %(default)s, the course's)")
    parser.add_argument("--output-lens", type=_length_range, default=COURSE_OUTPUT_LENS, metavar="LOW,HIGH",
                        help="output lengths, drawn uniformly from LOW..HIGH (default: %(default)s, the course's)")
    parser.add_argument("--batch", type=int_in(1, MAX_BATCH_SIZE), default=DEFAULT_BATCH_SIZE, metavar="N",
                        help=f"decode slots, at most {MAX_BATCH_SIZE} (default: %(default)s)")
    parser.add_argument("--prefill-step", type=positive_int, default=DEFAULT_PREFILL_STEP, metavar="N",
                        help="prompt tokens per prefill chunk (default: %(default)s)")
    parser.add_argument("--page-size", type=positive_int, default=DEFAULT_PAGE_SIZE, metavar="N",
                        help="tokens per KV page, at most the model's context (default: %(default)s)")
    parser.add_argument("--dtype", choices=DTYPES, default=None,
                        help="activation and KV dtype (default: float32 on cpu, bfloat16 on gpu)")
    parser.add_argument("--seed", type=seed_int, default=DEFAULT_SEED, metavar="N",
                        help="seed of the trace and of the random weights (default: %(default)s)")
    parser.add_argument("--kv-budget-bytes", type=int_list("kv-budget-bytes", most=MAX_KV_BUDGET_BYTES, a_set=True),
                        default=None, metavar="B,B",
                        help="also run the admission sweep: each variant under each KV byte budget")
    parser.add_argument("--budget-slots", type=int_in(1, MAX_BATCH_SIZE), default=None, metavar="N",
                        help=f"decode slots in the budget sweep, at most {MAX_BATCH_SIZE} (default: --requests "
                        f"up to {MAX_BATCH_SIZE}, so that only the budget limits admission)")
    parser.add_argument("--no-overlap", dest="overlap", action="store_false",
                        help="read every decode step's tokens back before building the next step "
                        "(default: pipelined, the next step is built while the device runs this one)")
    parser.add_argument("--warm-up", choices=tuple(WARM_UPS), default=None,
                        help="untimed run before each variant's timed one: two short requests, or the whole "
                        "trace, which compiles every GPU kernel variant the trace needs (default: short on "
                        "cpu, trace on gpu)")
    parser.add_argument("--rounds", type=int_in(1, MAX_ROUNDS), default=1, metavar="N",
                        help="timed runs per variant, in rounds whose variant order alternates (as given, then "
                        "reversed); each variant's numbers are its median round's by decode tok/s, the lower "
                        "middle one for an even N, and every round's throughput is listed; at most "
                        f"{MAX_ROUNDS} (default: %(default)s)")
    parser.add_argument("--isolation", choices=ISOLATIONS, default="shared",
                        help="shared: every variant in this process, one after another; process: every variant in "
                        "a fresh worker process of its own, for all its rounds, so that no variant runs on the "
                        "caches and heap another left behind; each worker compiles its own GPU kernels, so the "
                        "run takes longer (default: %(default)s)")
    options.add_device_option(parser)
    parser.add_argument("--out", type=path_arg, default=None, metavar="DIR",
                        help="directory for serve_bench.json and serve_bench.md, created if missing "
                        "(default: reports/serve-bench-<YYYYmmdd-HHMMSS>/)")


MAX_KV_BUDGET_BYTES = 1 << 50  # a PiB: past any machine's memory, and still a float's exact integer


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = options.add_command_parser(
        subparsers, NAME, "serve a request trace with a Qwen3 model: dense vs paged + gather vs paged", __doc__
    )
    add_options(parser)
    return parser


def _progress(text: str) -> None:
    print(f"pagecheck {NAME}: {text}", file=sys.stderr, flush=True)


def _minimum_budget(args: argparse.Namespace, config: Any, dtype: mx.Dtype, trace: Any) -> int:
    """The smallest budget under which every variant can admit the trace's largest request."""
    per_token_layer = 2 * config.num_kv_heads * config.head_dim * dtype.size
    largest = max(len(r.prompt) + r.max_new_tokens - 1 for r in trace.requests)
    return max(
        serving_kv_for(variant, config.num_layers, 1, per_token_layer, args.page_size).projected_bytes([largest])
        for variant in args.variants
    )


def serve_document(
    *, device: str, seed: int, config: Any, settings: ServeSettings, dtype: mx.Dtype, trace: Any,
    runs: dict[str, dict[str, Any]], rounds: int = 1, isolation: str = "shared",
) -> dict[str, Any]:
    """The serve_bench.json record (reports/schema/serve_bench.schema.json) of finished variant runs."""
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "device": device,
        "seed": seed,
        "model": asdict(config),
        "settings": {
            "batch_size": settings.batch_size, "prefill_step": settings.prefill_step,
            "page_size": settings.page_size, "dtype": str(dtype).rsplit(".", 1)[-1],
            "bits": DEFAULT_BITS, "group_size": DEFAULT_GROUP_SIZE, "overlap": settings.overlap,
            "warm_up": settings.warm_up, "rounds": rounds, "isolation": isolation,
        },
        "trace": trace.describe(),
        "variants": {variant: {k: v for k, v in entry.items() if k != "outputs"} for variant, entry in runs.items()},
        "tokens_match_paged": token_agreement(runs, BASELINE),
        "copy_ratio_vs_paged": copy_ratios(runs, BASELINE),
        "environment": collect_environment(),
    }


def run(args: argparse.Namespace) -> int:
    try:
        use_device(args.device)
    except DeviceUnavailable as exc:
        print(f"pagecheck {NAME}: {exc}", file=sys.stderr)
        return ExitCode.DEVICE_UNAVAILABLE
    try:
        config = model_config(args.model or DEFAULT_MODEL[args.device], args.layers)
    except ValueError as exc:
        print(f"pagecheck {NAME}: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    # Before the trace is drawn: a prompt of a billion tokens is gigabytes of token ids already.
    longest = args.prompt_lens[1] + args.output_lens[1] - 1
    if longest > config.max_context:
        print(f"pagecheck {NAME}: --prompt-lens and --output-lens allow requests of {longest} positions (the "
              f"longest prompt and output, less the last token), above {config.name}'s context of "
              f"{config.max_context}", file=sys.stderr)
        return ExitCode.USAGE
    if args.page_size > config.max_context:
        print(f"pagecheck {NAME}: --page-size {args.page_size} is above {config.name}'s context of "
              f"{config.max_context} positions", file=sys.stderr)
        return ExitCode.USAGE
    if args.requests * args.prompt_lens[1] > MAX_TRACE_TOKENS:
        print(f"pagecheck {NAME}: --requests {args.requests} with --prompt-lens up to {args.prompt_lens[1]} may draw "
              f"{args.requests * args.prompt_lens[1]:,} prompt tokens, above the {MAX_TRACE_TOKENS:,} a trace holds; "
              "lower one of them", file=sys.stderr)  # fmt: skip
        return ExitCode.USAGE
    dtype_name = args.dtype or DEFAULT_DTYPE[args.device]
    dtype = getattr(mx, dtype_name)
    trace = course_trace(args.seed, config.vocab_size, num_requests=args.requests, prompt_lens=args.prompt_lens,
                         output_lens=args.output_lens)
    if args.budget_slots is not None and not args.kv_budget_bytes:
        print(f"pagecheck {NAME}: --budget-slots sets the budget sweep's slots and needs --kv-budget-bytes",
              file=sys.stderr)
        return ExitCode.USAGE
    if args.kv_budget_bytes:
        least = _minimum_budget(args, config, dtype, trace)
        if min(args.kv_budget_bytes) < least:
            print(f"pagecheck {NAME}: --kv-budget-bytes {min(args.kv_budget_bytes)} cannot hold the trace's largest "
                  f"request; use at least {least}", file=sys.stderr)
            return ExitCode.USAGE

    # Made and checked before the run, so a folder that cannot take the files costs no serving time; an earlier
    # run's files there are moved aside, not overwritten.
    out = options.report_dir(args, default=default_report_dir(NAME), files=FILES)
    warm_up = args.warm_up or ("trace" if args.device == "gpu" else "short")
    settings = ServeSettings(args.batch, args.prefill_step, args.page_size, overlap=args.overlap, warm_up=warm_up)
    _progress(f"trace {trace.sha256[:16]}: {len(trace.requests)} requests, {trace.prompt_tokens} prompt tokens")

    @functools.cache
    def weights() -> Any:
        """The seeded weights, built at the first call: a run whose variants all serve in workers needs none."""
        _progress(f"building {config.name} ({config.num_layers} layers) with seeded random weights")
        return random_qwen3_weights(config, seed=args.seed, dtype=dtype)

    def report_variant(variant: str, entry: dict[str, Any]) -> None:
        if "error" in entry:
            _progress(f"{variant}: ERROR {entry['error']}")
        else:
            _progress(f"{variant}: {entry['metrics']['wall_seconds']:.1f} s")

    started: dict[str, int] = {}

    def start_variant(variant: str) -> None:
        started[variant] = started.get(variant, 0) + 1
        timed = "the timed run" if args.rounds == 1 else f"timed run {started[variant]} of {args.rounds}"
        if started[variant] == 1:
            _progress(f"{variant}: warming up on {WARM_UPS[warm_up]}, then {timed}")
        else:
            _progress(f"{variant}: {timed}")

    interrupted: PartialRun | None = None
    try:
        if args.isolation == "process":
            _progress(f"each variant in a worker process of its own, which builds {config.name} "
                      f"({config.num_layers} layers) with the seeded random weights")
            spec = ServeSpec(args.device, config, args.seed, dtype_name, trace, settings)
            runs = run_variants_in_processes(spec, args.variants, report_variant, start_variant, rounds=args.rounds)
        else:
            runs = run_variants(weights(), args.variants, trace, settings, report_variant, start_variant,
                                rounds=args.rounds)
    except PartialRun as exc:
        if not exc.partial:
            raise
        runs, interrupted = exc.partial, exc
    document = serve_document(device=args.device, seed=args.seed, config=config, settings=settings,
                              dtype=dtype, trace=trace, runs=runs, rounds=args.rounds, isolation=args.isolation)
    if interrupted is None and args.kv_budget_bytes:
        document["budget_slots"] = args.budget_slots or min(args.requests, MAX_BATCH_SIZE)
        sweep_settings = replace(settings, batch_size=document["budget_slots"])
        try:
            document["budget_sweep"] = run_budget_sweep(
                weights(), args.variants, trace, args.kv_budget_bytes, sweep_settings,
                lambda row: _progress(f"budget {row['kv_budget_bytes']} {row['variant']}: "
                                      f"{row.get('max_concurrent_requests', 'ERROR')} at once"),
            )
        except PartialRun as exc:
            document["budget_sweep"], interrupted = exc.partial, exc
    if interrupted is not None:
        # What finished is kept; the interrupt then ends the command as any interrupt does (exit 130).
        document["interrupted"] = {
            "stage": "budget_sweep" if "budget_sweep" in document else "variants",
            "finished_runs": interrupted.finished,
            "planned_runs": interrupted.planned,
        }

    write_json(out / "serve_bench.json", document)
    markdown = render_serve_bench(document)
    (out / "serve_bench.md").write_text(markdown)
    print(markdown)
    _progress(f"wrote {out / 'serve_bench.json'} and serve_bench.md")
    if interrupted is not None:
        _progress(f"{interrupted}; the files above keep the runs that finished")
        raise KeyboardInterrupt
    failed = any("error" in entry for entry in runs.values()) or any(
        "error" in row for row in document.get("budget_sweep", [])
    )
    return ExitCode.BENCH_INCORRECT if failed else ExitCode.OK


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pagecheck.commands.serve_bench", description=__doc__, formatter_class=options.HelpFormatter
    )
    add_options(parser)
    return int(run(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
