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
