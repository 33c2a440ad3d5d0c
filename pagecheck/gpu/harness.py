"""Check every GPU kernel schedule against the float64 reference, on a CUDA machine.

Each case builds a fresh random layout (shuffled pages, NaN in every slot no
request owns, -1 padding), runs the chosen schedules with NaN-poisoned
outputs (an element no thread writes stays NaN and fails), and compares with
reference/attention.py under reference/tolerance.py. Split schedules run twice
and must agree bit for bit (a moving result is a race). One case places the
pages at ids near 2**20 in a pool of more than 2**31 elements, so 32-bit
offset arithmetic would read the wrong pages.

    python -m pagecheck.gpu.harness [--dtypes bfloat16,float16] [--only decode|prefill] [--bulk] [--json PATH]

Exit status 0 when every check passes, 1 otherwise, 2 without a CUDA device.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from multiprocessing import get_context
from typing import Any

import numpy as np

from pagecheck.arg_types import seed_int
from pagecheck.reference.layouts import DTYPES, PagedLayout, random_layout
from pagecheck.reference.tolerance import compare

# (pinned schedule, split count, decode walk: True tensor cores, False CUDA
# cores), the pins of pagecheck.gpu.kernels.launch_plan; None leaves the choice
# to the plan. Runs that need the tensor-core kernels are skipped where those
# do not take the case (float32, odd head dims).
Run = tuple[str | None, int | None, bool | None]
DECODE = "paged_decode"
SPLIT = "paged_decode_split"
PREFILL = "paged_prefill"
PREFILL_MMA = "paged_prefill_mma"
PREFILL_WGMMA = "paged_prefill_wgmma"
# The warpgroup prefill runs in each block the plan takes or may be pinned to:
# (consumer warpgroups, registers of a producer warpgroup's threads, 0 for
# none); only on a device with warpgroup MMA.
WGMMA_BLOCKS = ((2, 0), (3, 0), (2, 56))
DECODE_RUNS: tuple[Run, ...] = (
    (DECODE, None, False), (SPLIT, 3, False), (DECODE, None, True), (SPLIT, 16, True), (None, None, None),
)
PREFILL_RUNS: tuple[Run, ...] = (
    (PREFILL, None, None), (None, None, None), (PREFILL_MMA, None, None), (PREFILL_WGMMA, None, None),
)


@dataclass(frozen=True)
class Case:
    label: str
    dtype: str
    contexts: tuple[int, ...]
    page_size: int
    num_queries: int
    group: int
    head_dim: int
    mask: str | None
    runs: tuple[Run, ...]
    num_kv_heads: int = 2
    logit_scale: float = 1.0
    scale: float | None = None


@dataclass
class Outcome:
    case: str
    schedule: str
    splits: int | None
    passed: bool
    summary: str
    rel_l2: float
    max_abs: float
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)


# (group, num_queries, mask): rows per block 1, 2, 4 and 8 (24 and 32 rows in chunks).
DECODE_SHAPES = ((1, 1, None), (2, 1, "causal"), (4, 1, None), (8, 3, "causal"), (4, 8, "causal"))


def decode_cases() -> list[Case]:
    out = []
    for dtype in DTYPES:
        for page_size in (1, 16, 128):
            for group, n, mask in DECODE_SHAPES:
                contexts = (0, n, n + 15, 300, 1000 + n) if page_size > 1 else (0, n, 40, 300)
                out.append(Case(
                    f"decode {dtype} page={page_size} G={group} L={n} {mask}", dtype, contexts,
                    page_size, n, group, 128, mask, DECODE_RUNS,
                ))
        for head_dim in (5, 64, 96, 256):
            out.append(Case(
                f"decode {dtype} D={head_dim}", dtype, (0, 2, 130, 517), 16, 2, 2, head_dim, "causal",
                DECODE_RUNS,
            ))
    out.append(Case("decode bfloat16 G=3 Hkv=3 scale=0.3", "bfloat16", (5, 260), 16, 2, 3, 128, "causal",
                    DECODE_RUNS, num_kv_heads=3, scale=0.3))
    out.append(Case("decode float32 large logits", "float32", (64, 700), 16, 1, 4, 128, None,
                    DECODE_RUNS, logit_scale=8.0))
    out.append(Case("decode bfloat16 ctx=32768", "bfloat16", (32768, 20001), 128, 1, 4, 128, None,
                    ((None, None, None), (DECODE, None, None), (SPLIT, 64, False))))
    out.append(Case("decode float16 ctx=32768 causal L=3", "float16", (32768,), 16, 3, 8, 128, "causal",
                    ((None, None, None), (SPLIT, 7, False))))
    return out


def prefill_cases() -> list[Case]:
    out = []
    for dtype in DTYPES:
        for page_size in (1, 5, 16, 128):
            for group, n in ((1, 9), (4, 70)):
                contexts = (0, n, n + 33, 400) if page_size > 1 else (0, n, 120)
                out.append(Case(
                    f"prefill {dtype} page={page_size} G={group} L={n} causal", dtype, contexts,
                    page_size, n, group, 128, "causal", PREFILL_RUNS,
                ))
        for head_dim in (5, 16, 48, 64, 256):
            out.append(Case(
                f"prefill {dtype} D={head_dim}", dtype, (0, 40, 333), 16, 40, 2, head_dim, "causal", PREFILL_RUNS,
            ))
        out.append(Case(f"prefill {dtype} no mask", dtype, (20, 300), 64, 20, 4, 128, None, PREFILL_RUNS))
    # A negative scale turns the softmax's extreme score into the smallest one; a zero scale weighs all alike.
    out.append(Case("prefill float16 scale=-0.2", "float16", (50, 300), 16, 40, 4, 128, "causal", PREFILL_RUNS,
                    scale=-0.2))
    out.append(Case("prefill bfloat16 scale=0", "bfloat16", (50, 300), 128, 40, 4, 64, "causal", PREFILL_RUNS,
                    scale=0.0))
    out.append(Case("prefill bfloat16 G=8 L=160 ctx=2500", "bfloat16", (2500, 700), 128, 160, 8, 128, "causal",
                    PREFILL_RUNS))
    out.append(Case("prefill bfloat16 long L=64 ctx=32768", "bfloat16", (32768,), 128, 64, 4, 128, "causal",
                    ((None, None, None),)))
    out.append(Case("decode schedules with L=12", "bfloat16", (12, 200), 16, 12, 2, 128, "causal",
                    ((DECODE, None, False), (SPLIT, 5, False), (DECODE, None, True), (SPLIT, 5, True))))
    return out


def layout_for(case: Case, rng: np.random.Generator) -> PagedLayout:
    return random_layout(
        rng, context_lens=case.contexts, page_size=case.page_size, num_queries=case.num_queries,
        num_q_heads=case.group * case.num_kv_heads, num_kv_heads=case.num_kv_heads,
        head_dim=case.head_dim, dtype=case.dtype, mask=case.mask, logit_scale=case.logit_scale,
    )


def reference_output(layout: PagedLayout, scale: float | None) -> np.ndarray:
    return layout.reference_output(scale)


def run_layout(label: str, layout: PagedLayout, want: np.ndarray, runs: tuple[Run, ...], scale: float | None,
               kwargs: dict[str, Any] | None = None, bulk: bool = False) -> list[Outcome]:
    import mlx.core as mx

    from pagecheck import ext
    from pagecheck.gpu import kernels as gpu_kernels

    args = kwargs if kwargs is not None else layout.as_mx()
    head_dim = layout.query.shape[3]
    outcomes = []
    wgmma = ext.gpu_warpgroup_mma() and ext.gpu_takes_warpgroup_mma(head_dim, layout.dtype)
    for schedule, splits, mma in runs:
        needs_mma = mma or schedule == PREFILL_MMA
        if needs_mma and not ext.gpu_takes_tensor_cores(head_dim, layout.dtype):
            continue
        if schedule == PREFILL_WGMMA and not wgmma:
            continue
        for warpgroups, producer in WGMMA_BLOCKS if schedule == PREFILL_WGMMA else ((None, None),):
            walk = "" if mma is None else ("/mma" if mma else "/lanes")
            height = "" if warpgroups is None else f"/wg{warpgroups}" + (f"p{producer}" if producer else "")
            name = (schedule or "auto") + walk + height
            # A kernel that never returns leaves this line last in the log, naming the run that hung.
            print(f"RUN  {label} [{name}]", file=sys.stderr, flush=True)
            start = time.perf_counter()
            got = gpu_kernels.paged_attention(**args, scale=scale, schedule=schedule, splits=splits,
                                              tensor_cores=mma, bulk=bulk, warpgroups=warpgroups,
                                              producer_registers=producer, poison_output=True)
            mx.eval(got)
            seconds = time.perf_counter() - start
            result = compare(got, want, layout.dtype)
            extra: dict[str, Any] = {}
            passed = result.passed
            if schedule == SPLIT or producer:
                # Blocks that meet through a merge counter or a producer's barriers: a race shows as a difference.
                again = gpu_kernels.paged_attention(**args, scale=scale, schedule=schedule, splits=splits,
                                                    tensor_cores=mma, bulk=bulk, warpgroups=warpgroups,
                                                    producer_registers=producer)
                same = bool(mx.array_equal(got, again, equal_nan=True).item())
                extra["repeatable"] = same
                passed = passed and same
            outcomes.append(Outcome(
                label, name, splits, passed, result.summary(), result.rel_l2_error,
                result.max_abs_error, seconds, extra,
            ))
    return outcomes


def big_pool_outcomes(rng: np.random.Generator, filler: int = (1 << 20) - 4, bulk: bool = False) -> list[Outcome]:
    """Pages at ids from `filler` on; the default gives ids near 2**20 in a pool of more
    than 2**31 elements (float16, 4 GiB per pool)."""
    import mlx.core as mx

    small = random_layout(rng, context_lens=(37, 300, 1), page_size=8, num_queries=1, num_q_heads=8,
                          num_kv_heads=2, head_dim=128, dtype="float16")
    num_pages = filler + small.key_pages.shape[0]
    pools = []
    for pages in (small.key_pages, small.value_pages):
        big = np.full((num_pages, *pages.shape[1:]), np.nan, dtype=np.float16)
        big[filler:] = pages.astype(np.float16)
        pools.append(mx.array(big))
        del big
    table = np.where(small.block_table >= 0, small.block_table + filler, -1).astype(np.int32)
    kwargs = small.as_mx()
    kwargs.update(key_pages=pools[0], value_pages=pools[1], block_table=mx.array(table))
    label = f"float16 page ids from {filler}, {num_pages * 2 * 8 * 128} elements per pool"
    runs: tuple[Run, ...] = (
        (DECODE, None, False), (SPLIT, 4, False), (DECODE, None, True), (SPLIT, 4, True),
        (PREFILL_MMA, None, None), (PREFILL, None, None), (PREFILL_WGMMA, None, None),
    )
    return run_layout(label, small, small.reference_output(), runs, None, kwargs, bulk)


def print_table(outcomes: list[Outcome]) -> None:
    for o in outcomes:
        verdict = "PASS" if o.passed else "FAIL"
        splits = "" if o.splits is None else f" S={o.splits}"
        print(f"{verdict} {o.case} [{o.schedule}{splits}] rel_l2={o.rel_l2:.2e} max_abs={o.max_abs:.2e} "
              f"{o.seconds * 1e3:.1f}ms {o.extra or ''}")
        if not o.passed:
            print(f"     {o.summary}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default=",".join(DTYPES), help="comma-separated dtypes to check")
    parser.add_argument("--json", default=None, help="write every outcome to this JSON file")
    parser.add_argument("--seed", type=seed_int, default=20240)
    parser.add_argument("--no-big-pool", action="store_true")
    parser.add_argument("--only", choices=("decode", "prefill"), default=None, help="one kind of case")
    parser.add_argument("--bulk", action="store_true",
                        help="tensor-core decode runs fill their ring with bulk (TMA) copies, sm_90+")
    args = parser.parse_args(argv)

    # Imported here, not at the top: the reference workers (spawned) need no MLX.
    from pagecheck.gpu import program as gpu_program

    why_not = gpu_program.cannot_run()
    if why_not:
        print(why_not)
        return gpu_program.CANNOT_RUN
    from pagecheck import ext

    # True on a device with warpgroup MMA until the warpgroup prefill fails to compile; the op then runs its
    # fallback prefill for the rest of the process, and the runs pinned to it are skipped below.
    warpgroup_prefill = ext.gpu_warpgroup_mma()
    rng = np.random.default_rng(args.seed)
    dtypes = args.dtypes.split(",")
    kinds = {"decode": decode_cases, "prefill": prefill_cases}
    cases = [case for kind, make in kinds.items() if args.only in (None, kind) for case in make()
             if case.dtype in dtypes]
    layouts = [layout_for(case, rng) for case in cases]
    outcomes: list[Outcome] = []
    # The float64 reference is the slow part; worker processes (spawned, so
    # they hold no CUDA state) compute it while the GPU checks run in order.
    with ProcessPoolExecutor(max_workers=os.cpu_count(), mp_context=get_context("spawn")) as pool:
        wants = [pool.submit(reference_output, layout, case.scale) for case, layout in zip(cases, layouts)]
        for case, layout, want in zip(cases, layouts, wants):
            try:
                found = run_layout(case.label, layout, want.result(), case.runs, case.scale, bulk=args.bulk)
            except Exception as err:  # a kernel that fails to compile or launch is a failed check
                found = [Outcome(case.label, "error", None, False, repr(err), float("nan"), float("nan"), 0.0)]
            print_table(found)
            outcomes += found
    if "float16" in dtypes and not args.no_big_pool:
        try:
            big = big_pool_outcomes(rng, bulk=args.bulk)
        except Exception as err:
            big = [Outcome("big pool", "error", None, False, repr(err), float("nan"), float("nan"), 0.0)]
        print_table(big)
        outcomes += big
    if warpgroup_prefill and not ext.gpu_warpgroup_mma():
        outcomes.append(Outcome("warpgroup prefill", PREFILL_WGMMA, None, False,
                                "did not compile: the prefill runs above after the failure took the fallback "
                                "kernel, and its pinned runs were skipped", float("nan"), float("nan"), 0.0))
        print_table(outcomes[-1:])
    failed = [o for o in outcomes if not o.passed]
    gpu_program.write_json(args.json, [asdict(o) for o in outcomes])
    print(f"{len(outcomes) - len(failed)}/{len(outcomes)} checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
