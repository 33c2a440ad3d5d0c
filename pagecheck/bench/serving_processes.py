"""Each serving variant in a process of its own (serve-bench's `--isolation process`).

Runs of several variants in one process can leave state behind for the next:
MLX's CUDA graph and kernel caches, compiled traces, Python's heap and its
collector's generations (serving_run empties MLX's buffer cache before every
run, which removes the largest such effect measured, ext/kernels/NOTES.md v16
item 4). Here every variant gets one worker process for all its rounds,
started with `spawn` (a fresh interpreter, no state copied from the parent), so
that a variant's numbers cannot depend on what ran before it: the worker
rebuilds the seeded weights itself, warms up once, and answers each "run" with
one timed run's entry. The rounds keep their alternating order across workers
(serving_run.run_rounds), and a worker empties MLX's buffer cache after each
run as well as before it, so an idle worker holds its weights and traces but
no cached device memory. Each worker compiles its own GPU kernels and warms
up on its own, so a run takes longer than in one process (on the H200, three
variants took 324 s for two rounds in workers, 86 s for one round in one
process, with the same step medians: NOTES v30 item 5).

A worker that dies (a device fault, the memory limit) yields an error entry
naming its exit status; the other variants still run.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from pagecheck.bench.serving_run import ServeSettings, empty_buffer_cache, run_rounds, serve_variant
from pagecheck.bench.serving_trace import ServeTrace
from pagecheck.serving.model_config import Qwen3Config
from pagecheck.serving.quantized import DEFAULT_BITS, DEFAULT_GROUP_SIZE

# How long a worker may take to finish after it is told to stop, before it is terminated.
STOP_SECONDS = 30.0


@dataclass(frozen=True)
class ServeSpec:
    """Everything a worker needs to rebuild the parent's run: plain, picklable data."""

    device: str  # "cpu" or "gpu" (pagecheck.device)
    config: Qwen3Config
    seed: int  # of the random weights
    dtype: str  # an mx dtype's name: "bfloat16", "float32", ...
    trace: ServeTrace
    settings: ServeSettings
    group_size: int = DEFAULT_GROUP_SIZE
    bits: int = DEFAULT_BITS


def _worker(spec: ServeSpec, variant: str, conn: Connection) -> None:
    """A worker's life: build the weights, then one timed run (warm-up first) per message until None."""
    import mlx.core as mx

    from pagecheck.device import use_device
    from pagecheck.serving.qwen3_weights import random_qwen3_weights

    # The parent alone answers Ctrl-C (a terminal sends it to the whole process group): it keeps the runs that
    # finished and stops this worker, which would otherwise die first and read as a failed variant.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    use_device(spec.device)
    weights = random_qwen3_weights(spec.config, seed=spec.seed, dtype=getattr(mx, spec.dtype),
                                   group_size=spec.group_size, bits=spec.bits)
    models: dict[str, Any] = {}
    while conn.recv() is not None:
        entry = serve_variant(weights, variant, spec.trace, spec.settings, models)
        empty_buffer_cache()
        conn.send(entry)
    conn.close()


class VariantProcesses:
    """One worker process per variant, started at the variant's first run; `serve(variant)` is one timed run's
    entry. Use as a context manager: leaving it stops every worker."""

    def __init__(self, spec: ServeSpec) -> None:
        self._spec = spec
        self._context = multiprocessing.get_context("spawn")
        self._workers: dict[str, tuple[Any, Connection]] = {}

    @property
    def pids(self) -> dict[str, int]:
        """The process id of each variant's worker, while the workers run."""
        return {variant: process.pid for variant, (process, _) in self._workers.items()}

    def __enter__(self) -> VariantProcesses:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        self.close(stop_now=exc_type is not None and issubclass(exc_type, KeyboardInterrupt))

    def _worker_for(self, variant: str) -> tuple[Any, Connection]:
        if variant not in self._workers:
            ours, theirs = self._context.Pipe()
            process = self._context.Process(target=_worker, args=(self._spec, variant, theirs),
                                            name=f"serve-bench {variant}", daemon=True)
            process.start()
            theirs.close()  # so that a dead worker reads as end of file here
            self._workers[variant] = (process, ours)
        return self._workers[variant]

    def serve(self, variant: str) -> dict[str, Any]:
        process, conn = self._worker_for(variant)
        try:
            conn.send("run")
            entry = conn.recv()
        except (EOFError, OSError):
            process.join(STOP_SECONDS)
            return {"error": f"the {variant} worker process ended (exit status {process.exitcode}) before "
                             "answering; its output above says why"}
        return entry

    def close(self, stop_now: bool = False) -> None:
        """Stop every worker: tell each to finish and wait STOP_SECONDS, or with `stop_now` (an interrupt, which
        may come mid-run) terminate each at once."""
        for _, conn in self._workers.values():
            try:
                conn.send(None)
            except (OSError, ValueError):
                pass
        for process, conn in self._workers.values():
            if stop_now:
                process.terminate()
            process.join(STOP_SECONDS)
            if process.is_alive():
                process.terminate()
                process.join(STOP_SECONDS)
            conn.close()
        self._workers.clear()


def run_variants_in_processes(
    spec: ServeSpec,
    variants: tuple[str, ...],
    report: Callable[[str, dict[str, Any]], None] | None = None,
    starting: Callable[[str], None] | None = None,
    rounds: int = 1,
) -> dict[str, dict[str, Any]]:
    """serving_run.run_variants with each variant in its own worker process (VariantProcesses)."""
    with VariantProcesses(spec) as workers:
        return run_rounds(variants, workers.serve, report, starting, rounds)
