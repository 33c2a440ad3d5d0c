"""What the GPU programs (bench_gpu, gpu_harness, gpu_profile, gpu_stream_probe) share at their edges:
the check that they can run here, and writing their JSON document."""

from __future__ import annotations

import json
from typing import Any

import mlx.core as mx

from pagecheck.gpu import clock as gpu_clock

# The exit status of a GPU program on a machine that cannot run it.
CANNOT_RUN = 2


def cannot_run(needs_gpu_clock: bool = False) -> str | None:
    """Why this machine cannot run the program (None when it can): no CUDA device for MLX, or,
    when the GPU's clock is needed, no torch with CUDA to read it."""
    if not mx.cuda.is_available():
        return "no CUDA device: mlx.core.cuda.is_available() is False"
    if needs_gpu_clock and not gpu_clock.available():
        return "torch with CUDA is not importable: its profiler is what reads the GPU's kernel times"
    return None


def write_json(path: str | None, document: Any) -> None:
    """Write the program's document to `path` (its --json); nothing when no path was given."""
    if path:
        with open(path, "w") as fh:
            json.dump(document, fh, indent=1)
