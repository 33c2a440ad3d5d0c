"""serve-bench's pieces on the small test model: trace, metrics, variant runs, budget sweep, report."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from pagecheck.serving.serving_kv import serving_kv_for
from pagecheck.reports.render.serve_bench import render_serve_bench
from pagecheck.commands.serve_bench import serve_document
from pagecheck.bench.serving_run import ServeSettings, copy_ratios, run_budget_sweep, run_variants, token_agreement
from pagecheck.bench.serving_trace import course_trace
from pagecheck.reports.schema_check import schema_errors
from tests.serving_fixtures import BATCH_SIZE, PAGE_SIZE, PREFILL_STEP, SERVING_CONFIG, serving_weights

SETTINGS = ServeSettings(BATCH_SIZE, PREFILL_STEP, PAGE_SIZE)
VARIANTS = ("dense", "paged_gather", "paged")


def small_trace(num_requests: int = 5):
    return course_trace(5, SERVING_CONFIG.vocab_size, num_requests=num_requests, prompt_lens=(3, 20),
                        output_lens=(2, 9))


def test_course_trace_is_seeded_bounded_and_hashed() -> None:
    trace = course_trace(0, 1000)
    assert len(trace.requests) == 16
    assert all(128 <= len(r.prompt) <= 1024 and 32 <= r.max_new_tokens <= 128 for r in trace.requests)
    assert course_trace(0, 1000).sha256 == trace.sha256
    assert course_trace(1, 1000).sha256 != trace.sha256


@pytest.fixture(scope="module")
def runs():
    return run_variants(serving_weights(), VARIANTS, small_trace(), SETTINGS)


def test_metrics_account_for_every_token(runs) -> None:
    trace = small_trace()
    for variant, entry in runs.items():
        metrics = entry["metrics"]
        assert metrics["prefill_tokens"] == trace.prompt_tokens, variant
        assert metrics["output_tokens"] == trace.output_tokens, variant
        # The first output of each request comes from its prefill, the rest from decode steps.
        assert metrics["decode_tokens"] == trace.output_tokens - len(trace.requests), variant
        assert 0 <= metrics["tail_waste_fraction"] < 1
        assert metrics["max_concurrent_requests"] == BATCH_SIZE


def test_decode_steps_split_by_company_cover_every_decode_token(runs) -> None:
    for variant, entry in runs.items():
        metrics = entry["metrics"]
        split = metrics["decode_steps_by_company"]
        assert split["alone"]["steps"] > 0 and split["beside_prefill"]["steps"] > 0, variant
        assert split["alone"]["steps"] + split["beside_prefill"]["steps"] <= metrics["steps"], variant
        tokens = sum(part["steps"] * part["mean_batch"] for part in split.values())
        assert tokens == pytest.approx(metrics["decode_tokens"]), variant
        for part in split.values():
            assert 0 < part["median_ms"] <= metrics["decode_step_ms"]["max"], variant


def test_copy_bytes_by_variant(runs) -> None:
    copies = {variant: entry["metrics"]["copy_bytes"] for variant, entry in runs.items()}
    assert copies["paged"]["repack"] == copies["paged"]["gather"] == 0
    assert copies["paged"]["growth"] == copies["paged_gather"]["growth"] > 0
    ratios = copy_ratios(runs, "paged")
    assert ratios["paged"] == 1 and ratios["dense"] > 1 and ratios["paged_gather"] > 1
    assert token_agreement(runs, "paged") == {variant: 1.0 for variant in VARIANTS}


def test_budget_sweep_admits_what_the_budget_holds() -> None:
    trace = small_trace(num_requests=6)
    per_token_layer = 2 * SERVING_CONFIG.num_kv_heads * SERVING_CONFIG.head_dim * 4
    largest = max(len(r.prompt) + r.max_new_tokens - 1 for r in trace.requests)
    one_dense = serving_kv_for("dense", SERVING_CONFIG.num_layers, 1, per_token_layer, PAGE_SIZE).projected_bytes([largest])
    rows = run_budget_sweep(
        serving_weights(), ("dense", "paged"), trace, (one_dense, 100 * one_dense), ServeSettings(6, PREFILL_STEP, PAGE_SIZE)
    )
    by_key = {(row["kv_budget_bytes"], row["variant"]): row for row in rows}
    assert by_key[(one_dense, "dense")]["max_concurrent_requests"] >= 1
    assert by_key[(one_dense, "paged")]["max_concurrent_requests"] >= by_key[(one_dense, "dense")]["max_concurrent_requests"]
    assert by_key[(100 * one_dense, "paged")]["max_concurrent_requests"] == 6


def test_report_renders_and_json_is_strict(runs) -> None:
    document = {
        "created": "now", "device": "cpu", "seed": 5, "model": asdict(SERVING_CONFIG),
        "settings": {"batch_size": BATCH_SIZE, "prefill_step": PREFILL_STEP, "page_size": PAGE_SIZE,
                     "dtype": "float32", "bits": 4, "group_size": 64},
        "trace": small_trace().describe(),
        "variants": {variant: {"metrics": entry["metrics"]} for variant, entry in runs.items()},
        "tokens_match_paged": token_agreement(runs, "paged"),
        "copy_ratio_vs_paged": copy_ratios(runs, "paged"),
    }
    json.dumps(document, allow_nan=False)
    markdown = render_serve_bench(document)
    for label in ("dense (batch K/V repacked every step)", "paged + dense gather", "paged (direct paged attention)"):
        assert label in markdown
        assert f"- {label}: decode steps " in markdown


def needs_schema_validation() -> None:
    """Skips where the test extra's jsonschema is missing (gpu_verify.sh's device install has only the runtime
    dependencies); CI installs the extra, so these tests run there."""
    pytest.importorskip("jsonschema", reason="validating serve_bench.json needs pagecheck[test]'s jsonschema")


def test_serve_bench_json_matches_its_schema(runs) -> None:
    import mlx.core as mx

    needs_schema_validation()

    document = serve_document(device="cpu", seed=5, config=SERVING_CONFIG, settings=SETTINGS, dtype=mx.float32,
                              trace=small_trace(), runs=runs)
    assert schema_errors("serve_bench", json.loads(json.dumps(document, allow_nan=False))) == []
    broken = dict(document, variants={"paged": {"metrics": {"steps": -1}}})
    assert schema_errors("serve_bench", broken)


def test_a_trace_warm_up_serves_the_whole_trace_before_the_timed_run(monkeypatch) -> None:
    from pagecheck.bench import serving_run

    served: list[int] = []
    real = serving_run.batch_generate

    def counting(model, requests, **kwargs):
        served.append(len(requests))
        return real(model, requests, **kwargs)

    monkeypatch.setattr(serving_run, "batch_generate", counting)
    trace = small_trace(num_requests=3)
    for warm_up, first in (("trace", 3), ("short", 2)):
        served.clear()
        run = serving_run.run_variant(serving_weights(), "paged", trace, ServeSettings(
            BATCH_SIZE, PREFILL_STEP, PAGE_SIZE, warm_up=warm_up))
        assert "metrics" in run and served == [first, 3]
    with pytest.raises(ValueError, match="warm_up='long' is not one of"):
        serving_run._warm_up(None, ServeSettings(BATCH_SIZE, PREFILL_STEP, PAGE_SIZE, warm_up="long"), trace)


def test_the_command_reports_its_warm_up_and_records_its_loop(tmp_path) -> None:
    import subprocess
    import sys

    common = ["--layers", "1", "--requests", "2", "--prompt-lens", "3,5", "--output-lens", "2,3", "--variants", "paged"]
    outputs = {}
    for extra in ([], ["--no-overlap", "--warm-up", "trace", "--isolation", "process"]):
        out = tmp_path / ("stepwise" if extra else "pipelined")
        done = subprocess.run([sys.executable, "-m", "pagecheck.cli", "serve-bench", *common, *extra, "--out", str(out)],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        warm = "the whole trace untimed" if extra else "two short requests"
        assert f"paged: warming up on {warm}, then the timed run" in done.stderr
        document = json.loads((out / "serve_bench.json").read_text())
        assert document["settings"]["overlap"] is not bool(extra)
        assert document["settings"]["warm_up"] == ("trace" if extra else "short")
        assert document["settings"]["isolation"] == ("process" if extra else "shared")
        loop = "read back one by one (--no-overlap)" if extra else "decode steps pipelined"
        assert loop in (out / "serve_bench.md").read_text()
        isolation = "each variant in a worker process of its own (--isolation process)" if extra else "every variant in one process"
        assert isolation in (out / "serve_bench.md").read_text()
        assert ("building qwen3-tiny" in done.stderr) is not bool(extra)  # workers build their own weights
        outputs[bool(extra)] = document["variants"]["paged"]["metrics"]["output_tokens"]
    assert outputs[True] == outputs[False]


def test_rounds_alternate_the_order_warm_each_variant_once_and_keep_the_median_round(monkeypatch) -> None:
    from pagecheck.bench import serving_run

    calls: list[tuple[str, str]] = []
    decode_rates = iter([30.0, 10.0, 20.0, 11.0, 33.0, 22.0])  # run order: a, b, b, a, a, b

    def fake_warm_up(model, settings, trace) -> None:
        calls.append(("warm", model.attention_path))

    def fake_timed_run(model, trace, settings):
        calls.append(("timed", model.attention_path))
        rate = next(decode_rates)
        metrics = {field: rate for field in serving_run.ROUND_FIELDS} | {"decode_step_ms": {"median": 1000 / rate}}
        return {"metrics": metrics, "outputs": {}}

    monkeypatch.setattr(serving_run, "_warm_up", fake_warm_up)
    monkeypatch.setattr(serving_run, "_timed_run", fake_timed_run)
    runs = serving_run.run_variants(serving_weights(), ("paged", "dense"), small_trace(), SETTINGS, rounds=3)
    assert calls == [
        ("warm", "paged"), ("timed", "paged"), ("warm", "dense"), ("timed", "dense"),
        ("timed", "dense"), ("timed", "paged"),
        ("timed", "paged"), ("timed", "dense"),
    ]
    assert runs["paged"]["metrics"]["decode_tokens_per_s"] == 30.0  # of 30, 11, 33
    assert runs["dense"]["metrics"]["decode_tokens_per_s"] == 20.0  # of 10, 20, 22
    assert [r["decode_tokens_per_s"] for r in runs["paged"]["rounds"]] == [30.0, 11.0, 33.0]
    assert serving_run.median_round([{"metrics": {"decode_tokens_per_s": rate}} for rate in (5.0, 9.0)]) == {
        "metrics": {"decode_tokens_per_s": 5.0}}  # the lower middle one of an even count
    with pytest.raises(ValueError, match="rounds must be a positive int"):
        serving_run.run_variants(serving_weights(), ("paged",), small_trace(), SETTINGS, rounds=0)


def test_a_variant_that_fails_in_a_later_round_is_an_error_and_is_not_run_again(monkeypatch) -> None:
    from pagecheck.bench import serving_run

    runs_made = []

    def flaky(model, trace, settings):
        runs_made.append(model.attention_path)
        if len(runs_made) == 2:
            raise RuntimeError("device lost")
        return {"metrics": {"decode_tokens_per_s": 1.0}, "outputs": {}}

    monkeypatch.setattr(serving_run, "_warm_up", lambda *args: None)
    monkeypatch.setattr(serving_run, "_timed_run", flaky)
    runs = serving_run.run_variants(serving_weights(), ("paged",), small_trace(), SETTINGS, rounds=3)
    assert runs == {"paged": {"error": "RuntimeError: device lost"}} and len(runs_made) == 2


def test_the_command_records_every_round_and_the_schema_holds_them(tmp_path) -> None:
    import subprocess
    import sys

    out = tmp_path / "rounds"
    done = subprocess.run(
        [sys.executable, "-m", "pagecheck.cli", "serve-bench", "--layers", "1", "--requests", "2", "--prompt-lens",
         "3,5", "--output-lens", "2,3", "--variants", "dense,paged", "--rounds", "2", "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "paged: timed run 2 of 2" in done.stderr and "dense: warming up on two short requests, then timed run 1 of 2" in done.stderr
    document = json.loads((out / "serve_bench.json").read_text())
    assert document["settings"]["rounds"] == 2
    for variant in ("dense", "paged"):
        rounds = document["variants"][variant]["rounds"]
        assert len(rounds) == 2
        assert document["variants"][variant]["metrics"]["decode_tokens_per_s"] == min(r["decode_tokens_per_s"] for r in rounds)
    markdown = (out / "serve_bench.md").read_text()
    assert "2 timed runs per variant in rounds of alternating order" in markdown
    assert "- paged (direct paged attention), each round (decode / output): " in markdown
    needs_schema_validation()  # last: everything above runs without the test extra too
    assert schema_errors("serve_bench", document) == []


def test_every_run_starts_from_an_empty_buffer_cache(monkeypatch) -> None:
    import mlx.core as mx

    from pagecheck.bench import serving_run

    cached_at_start: list[tuple[str, int]] = []

    def leave_buffers_cached() -> None:
        scratch = mx.zeros((1 << 20,))
        mx.eval(scratch)
        del scratch  # its buffer goes to MLX's cache: on CUDA from the completion thread, hence the synchronize
        mx.synchronize()

    def fake_warm_up(model, settings, trace) -> None:
        cached_at_start.append(("warm", mx.get_cache_memory()))
        leave_buffers_cached()

    def fake_timed_run(model, trace, settings):
        cached_at_start.append(("timed", mx.get_cache_memory()))
        leave_buffers_cached()
        return {"metrics": {field: 1.0 for field in serving_run.ROUND_FIELDS} | {"decode_step_ms": {"median": 1.0}},
                "outputs": {}}

    monkeypatch.setattr(serving_run, "_warm_up", fake_warm_up)
    monkeypatch.setattr(serving_run, "_timed_run", fake_timed_run)
    leave_buffers_cached()
    serving_run.run_variants(serving_weights(), ("dense", "paged"), small_trace(), SETTINGS, rounds=2)
    # A first run's warm-up starts empty; its timed run keeps what its own warm-up cached.
    assert [kind for kind, _ in cached_at_start] == ["warm", "timed", "warm", "timed", "timed", "timed"]
    assert [cached for kind, cached in cached_at_start if kind == "warm"] == [0, 0]
    assert [cached for _, cached in cached_at_start[4:]] == [0, 0]
    assert cached_at_start[1][1] > 0
    leave_buffers_cached()
    run = serving_run.run_variant(serving_weights(), "paged", small_trace(), SETTINGS)
    assert "metrics" in run and cached_at_start[-2] == ("warm", 0)


def test_a_budget_too_small_for_the_largest_request_is_refused_before_any_model_is_built(capsys) -> None:
    from pagecheck.commands import serve_bench
    from pagecheck.exit_codes import ExitCode

    code = serve_bench.main(["--layers", "1", "--requests", "2", "--kv-budget-bytes", "10,99999999"])
    assert code == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "--kv-budget-bytes 10 cannot hold the trace's largest request; use at least " in err
    assert "building" not in err


def test_more_layers_than_the_model_has_is_refused(capsys) -> None:
    """--layers keeps the model's first N layers; more than it has would build (and time) a model that does not
    exist."""
    from pagecheck.commands import serve_bench
    from pagecheck.exit_codes import ExitCode
    from pagecheck.serving.model_config import model_config

    assert serve_bench.main(["--model", "qwen3-tiny", "--layers", "99"]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "layers=99 is more than the 2 layers of qwen3-tiny" in err and "building" not in err
    assert model_config("qwen3-tiny", 2).num_layers == 2


@pytest.mark.parametrize(("options", "message"), [
    (["--prompt-lens", "1,40000", "--output-lens", "1,962"], "allow requests of 40961 positions (the longest prompt "
     "and output, less the last token), above qwen3-tiny's context of 40960"),
    (["--prompt-lens", "1000000000,1000000000"], "allow requests of 1000000127 positions"),
    (["--page-size", "10000000"], "--page-size 10000000 is above qwen3-tiny's context of 40960 positions"),
])
def test_sizes_beyond_the_models_context_are_refused_before_the_trace_is_drawn(
    capsys, options: list[str], message: str
) -> None:
    """A prompt of a billion tokens was a MemoryError while drawing the trace; a page of ten million tokens
    ended the process in MLX's allocator."""
    from pagecheck.commands import serve_bench
    from pagecheck.exit_codes import ExitCode

    assert serve_bench.main(["--model", "qwen3-tiny", *options]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert message in err and "trace" not in err


@pytest.mark.parametrize("option", ["--batch", "--budget-slots"])
def test_decode_slots_above_what_serving_takes_are_usage_errors(capsys, option: str) -> None:
    from pagecheck.commands import serve_bench

    with pytest.raises(SystemExit) as exit_:
        serve_bench.main([option, "1025"])
    assert exit_.value.code == 2
    assert f"argument {option}: 1025 must be in 1..1024" in capsys.readouterr().err


def _interrupt_timed_run(monkeypatch, at: int) -> list[str]:
    """serving_run's timed run, with its `at`-th call (1-based) raising KeyboardInterrupt as Ctrl-C would
    there; returns the variants of the timed runs, in order."""
    from pagecheck.bench import serving_run

    timed: list[str] = []
    real = serving_run._timed_run

    def timed_run(model, trace, settings):
        timed.append(model.attention_path)
        if len(timed) == at:
            raise KeyboardInterrupt
        return real(model, trace, settings)

    monkeypatch.setattr(serving_run, "_timed_run", timed_run)
    return timed


def test_an_interrupt_between_rounds_keeps_the_runs_that_finished(monkeypatch) -> None:
    from pagecheck.bench import serving_run

    timed = _interrupt_timed_run(monkeypatch, at=4)  # run order: paged, dense, dense, [paged]
    with pytest.raises(serving_run.PartialRun) as stopped:
        serving_run.run_variants(serving_weights(), ("paged", "dense"), small_trace(), SETTINGS, rounds=2)
    assert timed == ["paged", "dense", "dense", "paged"]
    assert isinstance(stopped.value, KeyboardInterrupt)
    assert (stopped.value.finished, stopped.value.planned) == (3, 4)
    partial = stopped.value.partial
    assert list(partial) == ["paged", "dense"]
    assert "rounds" not in partial["paged"] and partial["paged"]["metrics"]["output_tokens"] > 0
    assert len(partial["dense"]["rounds"]) == 2

    _interrupt_timed_run(monkeypatch, at=1)
    with pytest.raises(serving_run.PartialRun) as stopped:
        serving_run.run_variants(serving_weights(), ("paged", "dense"), small_trace(), SETTINGS)
    assert stopped.value.partial == {} and stopped.value.finished == 0


@pytest.mark.parametrize(("interrupt_at", "stage", "kept", "sweep_rows"), [
    (2, "variants", ["paged"], None),
    (4, "budget_sweep", ["paged", "dense"], 1),  # the sweep's second run is the fourth timed run
])
def test_the_command_writes_what_finished_before_an_interrupt_and_exits_130(
    monkeypatch, tmp_path, capsys, interrupt_at: int, stage: str, kept: list[str], sweep_rows: int | None
) -> None:
    """Ctrl-C used to lose every finished variant: serve_bench.json was written only at the end."""
    from pagecheck import cli

    _interrupt_timed_run(monkeypatch, interrupt_at)
    out = tmp_path / "stopped"
    code = cli.main(["serve-bench", "--layers", "1", "--requests", "2", "--prompt-lens", "3,5", "--output-lens", "2,3",
                     "--variants", "paged,dense", "--kv-budget-bytes", "100000000", "--out", str(out)])
    assert code == 130
    err = capsys.readouterr().err
    # Either stage plans two runs (two variants, one round or one budget) and is stopped in its second.
    assert "interrupted after 1 of 2 timed runs; the files above keep the runs that finished" in err
    assert err.rstrip().endswith("pagecheck serve-bench: interrupted")
    document = json.loads((out / "serve_bench.json").read_text())
    assert list(document["variants"]) == kept
    assert document["interrupted"]["stage"] == stage
    assert len(document.get("budget_sweep", [])) == (sweep_rows or 0)
    assert "INCOMPLETE: interrupted after" in (out / "serve_bench.md").read_text()
    needs_schema_validation()
    assert schema_errors("serve_bench", document) == []


def test_an_out_folder_that_cannot_take_the_files_is_refused_before_serving_and_an_earlier_run_is_kept(
    tmp_path, capsys
) -> None:
    """A folder named serve_bench.json in --out failed the run at its end (exit 9, results lost); a second run into
    the same --out overwrote the first one's files."""
    from pagecheck import cli
    from pagecheck.exit_codes import ExitCode

    small = ["serve-bench", "--layers", "1", "--requests", "1", "--prompt-lens", "3,4", "--output-lens", "2,2",
             "--variants", "paged"]
    (tmp_path / "blocked" / "serve_bench.json").mkdir(parents=True)
    assert cli.main([*small, "--out", str(tmp_path / "blocked")]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "holds serve_bench.json as something other than a file" in err and "building" not in err
    for _ in range(2):
        assert cli.main([*small, "--out", str(tmp_path / "twice")]) == ExitCode.OK
    earlier = [p for p in (tmp_path / "twice").iterdir() if p.name.startswith("earlier-")]
    assert len(earlier) == 1 and (earlier[0] / "serve_bench.json").is_file()
    assert (tmp_path / "twice" / "serve_bench.json").is_file()


def test_a_request_served_within_one_step_counts_as_running() -> None:
    """Concurrency was counted after each step: a request admitted, served and finished within one step was
    never counted, and the sweep said 0 requests at once for a trace it served."""
    trace = course_trace(5, SERVING_CONFIG.vocab_size, num_requests=1, prompt_lens=(4, 4), output_lens=(1, 1))
    (row,) = run_budget_sweep(serving_weights(), ("paged",), trace, (100_000_000,), SETTINGS)
    assert row["max_concurrent_requests"] == 1, row


def test_budget_slots_without_a_budget_is_a_usage_error(capsys) -> None:
    """--budget-slots without --kv-budget-bytes was silently ignored."""
    from pagecheck.commands import serve_bench
    from pagecheck.exit_codes import ExitCode

    assert serve_bench.main(["--layers", "1", "--requests", "2", "--budget-slots", "4"]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "--budget-slots sets the budget sweep's slots and needs --kv-budget-bytes" in err and "building" not in err
