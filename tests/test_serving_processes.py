"""serve-bench's worker processes: each variant served in a fresh process of its own, with the same results as
in this one; a worker that dies is an error entry, and leaving the workers stops every one."""

from __future__ import annotations

import dataclasses
import os

import pytest

from pagecheck.bench import serving_run
from pagecheck.bench.serving_processes import ServeSpec, VariantProcesses, run_variants_in_processes
from tests.serving_fixtures import SERVING_CONFIG, SERVING_GROUP_SIZE, serving_weights
from tests.test_serve_bench import SETTINGS, small_trace

VARIANTS = ("dense", "paged")


def spec(config=SERVING_CONFIG) -> ServeSpec:
    # serving_fixtures.serving_weights' recipe, rebuilt by each worker from these plain values.
    return ServeSpec("cpu", config, 7, "float32", small_trace(), SETTINGS, group_size=SERVING_GROUP_SIZE)


def test_workers_serve_the_same_tokens_as_this_process_each_from_its_own_process() -> None:
    here = serving_run.run_variants(serving_weights(), VARIANTS, small_trace(), SETTINGS, rounds=2)
    with VariantProcesses(spec()) as workers:
        apart = serving_run.run_rounds(VARIANTS, workers.serve, rounds=2)
        pids = dict(workers.pids)
    assert set(pids) == set(VARIANTS)
    assert len(set(pids.values())) == len(VARIANTS) and os.getpid() not in pids.values()
    for variant in VARIANTS:
        assert "error" not in apart[variant], apart[variant]
        assert apart[variant]["outputs"] and apart[variant]["outputs"] == here[variant]["outputs"], variant
        assert len(apart[variant]["rounds"]) == 2
        for field in ("prefill_tokens", "decode_tokens", "output_tokens", "steps"):
            assert apart[variant]["metrics"][field] == here[variant]["metrics"][field], (variant, field)
    for pid in pids.values():  # leaving the context stopped and reaped every worker
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_worker_that_dies_is_an_error_entry_and_the_run_goes_on() -> None:
    # Untied embeddings make the worker's weight build raise before it answers: the process exits with 1.
    broken = spec(dataclasses.replace(SERVING_CONFIG, tie_word_embeddings=False))
    reported: list[str] = []
    runs = run_variants_in_processes(broken, VARIANTS, report=lambda variant, entry: reported.append(variant),
                                     rounds=2)
    for variant in VARIANTS:
        assert runs[variant] == {"error": f"the {variant} worker process ended (exit status 1) before answering; "
                                          "its output above says why"}
    assert reported == list(VARIANTS)  # each failed once and was not run again


def test_ctrl_c_keeps_the_finished_variant_and_stops_every_worker(tmp_path) -> None:
    """Ctrl-C at a terminal reaches the whole process group: the parent writes the variant that finished and
    exits 130, and the worker still serving is stopped, not recorded as a failed variant."""
    import json
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "stopped"
    command = [sys.executable, "-m", "pagecheck.cli", "serve-bench", "--isolation", "process", "--layers", "1",
               "--requests", "4", "--prompt-lens", "3,5", "--output-lens", "1000,1000", "--variants", "dense,paged",
               "--out", str(out)]
    # Each timed run takes seconds; the signal comes as the paged worker starts, after dense's run finished.
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    lines: list[str] = []
    deadline = time.monotonic() + 240
    for line in process.stderr:
        lines.append(line)
        if "paged: warming up" in line or time.monotonic() > deadline:
            break
    os.killpg(process.pid, signal.SIGINT)
    _, rest = process.communicate(timeout=120)
    err = "".join(lines) + rest
    assert process.returncode == 130, err[-3000:]
    assert "interrupted after 1 of 2 timed runs" in err and "ERROR" not in err, err[-3000:]
    document = json.loads((out / "serve_bench.json").read_text())
    assert list(document["variants"]) == ["dense"] and "metrics" in document["variants"]["dense"]
    assert document["interrupted"] == {"stage": "variants", "finished_runs": 1, "planned_runs": 2}
    deadline = time.monotonic() + 15  # multiprocessing's resource tracker leaves when it sees the parent gone
    while time.monotonic() < deadline:
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        left = subprocess.run(["ps", "-o", "pid,args", "-g", str(process.pid)], capture_output=True, text=True).stdout
        pytest.fail(f"processes left in the run's group:\n{left}")
