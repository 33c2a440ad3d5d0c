"""pagecheck.bench.serving_profile on the CPU stream: the step's three spans and its graph's primitives."""

import re

import pytest

from pagecheck.bench import serving_profile


MODE_FLAGS = {"compiled": [], "compiled layer halves": ["--layer-halves"], "eager": ["--eager"]}


def profile(capsys, *options: str) -> str:
    """What a small CPU profile (qwen3-tiny, 2 layers, 20 cached tokens, 2 steps) prints; later options win."""
    argv = ["--model", "qwen3-tiny", "--layers", "2", "--context", "20", "--steps", "2", "--prefill-chunk", "20",
            "--cpu", *options]
    assert serving_profile.main(argv) == 0
    return capsys.readouterr().out


def graph_counts(out: str, what: str) -> dict[str, int]:
    """The printed graph of one `what` (decode step, prefill chunk): its nodes by kind, which sum to its total."""
    graph = re.search(rf"graph of one {what}: (\d+) nodes, ([\d.]+) per layer: (.*)", out)
    assert graph is not None, out
    counts = {name: int(count) for name, count in re.findall(r"(\w+) (\d+)", graph.group(3))}
    assert int(graph.group(1)) == sum(counts.values())
    return counts


@pytest.mark.parametrize("mode", list(MODE_FLAGS))
def test_a_small_profile_reports_spans_and_the_step_graph(capsys, mode: str) -> None:
    out = profile(capsys, "--batch", "2", *MODE_FLAGS[mode])
    assert f"{mode} decode, batch 2" in out
    spans = re.search(r"decode step: build ([\d.]+) ms, submit ([\d.]+) ms, wait ([\d.]+) ms, total ([\d.]+) ms", out)
    assert spans is not None, out
    build, submit, wait, total = map(float, spans.groups())
    assert total > 0 and abs(build + submit + wait - total) < 0.05 * total + 0.02
    counts = graph_counts(out, "decode step")
    # Both layers write their K and V rows (one scatter per tensor) and attend once over the pages.
    assert counts["PagedAttention"] == 2 and counts["Scatter"] == 4


def test_a_partial_batch_profiles_its_empty_slots_too(capsys) -> None:
    out = profile(capsys, "--batch", "3", "--active", "1")
    assert "batch 3 (1 slot active), context 20" in out
    counts = graph_counts(out, "decode step")
    # Each layer attends once over the pages and writes its K and V rows, the empty slots' rows to a spare
    # position (serving/step_batching_cache.py), so nothing is gathered.
    assert counts["PagedAttention"] == 2 and counts["Scatter"] == 4 and "Gather" not in counts


@pytest.mark.parametrize("argv, message", [(["--batch", "2", "--active", "3"], "--active 3 is more than --batch 2"),
                                           (["--phase", "prefill", "--active", "1"], "--active applies to --phase decode")])
def test_active_slots_are_checked(capsys, argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit):
        serving_profile.main(argv + ["--cpu"])
    assert message in capsys.readouterr().err


def test_an_overlapped_profile_waits_for_the_previous_step(capsys) -> None:
    argv = ["--model", "qwen3-tiny", "--layers", "2", "--batch", "2", "--context", "20", "--steps", "3",
            "--prefill-chunk", "20", "--overlap", "--cpu"]
    assert serving_profile.main(argv) == 0
    out = capsys.readouterr().out
    assert re.search(r"decode step \(each overlapped with the previous one, whose result it waits for\): build "
                     r"[\d.]+ ms, submit [\d.]+ ms, wait [\d.]+ ms", out), out
    per_step = re.search(r"per step, build \+ submit \+ wait ms: (.*)", out).group(1).split(", ")
    assert len(per_step) == 3 and per_step[0].endswith("+0.0")  # the first step has no previous step to await


def test_overlapped_steps_each_await_the_one_before(monkeypatch) -> None:
    built: list[object] = []
    awaited: list[object] = []

    def build():
        built.append(serving_profile.mx.array(len(built)))
        return built[-1]

    monkeypatch.setattr(serving_profile.mx, "async_eval", lambda result: None)
    monkeypatch.setattr(serving_profile.mx, "eval", lambda result: awaited.append(result))
    assert len(serving_profile.time_steps(build, 3, overlap=True)) == 3
    # Steps 0 and 1 awaited inside the loop (by steps 1 and 2), step 2 after it.
    assert [id(a) for a in awaited] == [id(b) for b in built]
    awaited.clear()
    built.clear()
    serving_profile.time_steps(build, 2)
    assert [id(a) for a in awaited] == [id(b) for b in built]


def test_overlap_is_for_decode_steps(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        serving_profile.main(["--model", "qwen3-tiny", "--phase", "prefill", "--overlap", "--cpu"])
    assert exit_.value.code == 2
    assert "--overlap applies to --phase decode" in capsys.readouterr().err


def test_a_prefill_profile_times_chunks_over_a_cached_context(capsys) -> None:
    out = profile(capsys, "--phase", "prefill", "--chunk", "8")
    assert "chunks of 8 after a context of 20" in out
    spans = re.search(r"prefill chunk: build ([\d.]+) ms, submit ([\d.]+) ms, wait ([\d.]+) ms", out)
    assert spans is not None, out
    counts = graph_counts(out, "prefill chunk")
    # One attention over the pages per layer, no sampling: a chunk's hidden states are the result.
    assert counts["PagedAttention"] == 2 and "ArgReduce" not in counts


@pytest.mark.parametrize("option", ["--context", "--steps", "--page-size", "--prefill-chunk", "--chunk", "--layers"])
def test_sizes_must_be_positive(capsys, option: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        serving_profile.main(["--model", "qwen3-tiny", option, "0", "--cpu"])
    assert exit_.value.code == 2
    assert f"argument {option}: 0 must be positive" in capsys.readouterr().err


@pytest.mark.parametrize("batch", ["0", "1025"])
def test_the_batch_is_one_to_serving_s_most_decode_slots(capsys, batch: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        serving_profile.main(["--model", "qwen3-tiny", "--batch", batch, "--cpu"])
    assert exit_.value.code == 2
    assert f"argument --batch: {batch} must be in 1..1024" in capsys.readouterr().err


@pytest.mark.parametrize(("options", "message"), [
    (["--context", "40950"], "--context 40950 and --steps 20 reach 40975 positions, above qwen3-tiny's context of 40960"),
    (["--phase", "prefill", "--context", "30000", "--chunk", "512"],
     "--context 30000 and --steps 20 reach 42800 positions"),
    (["--page-size", "40961"], "--page-size 40961 is above qwen3-tiny's context of 40960"),
])
def test_sizes_beyond_the_models_context_are_usage_errors(capsys, options: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        serving_profile.main(["--model", "qwen3-tiny", *options, "--cpu"])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
