"""pagecheck.bench.serving_profile on the CPU stream: the step's three spans and its graph's primitives."""

import re

from pagecheck.bench import serving_profile


def test_a_small_profile_reports_spans_and_the_step_graph(capsys) -> None:
    argv = ["--model", "qwen3-tiny", "--layers", "2", "--batch", "2", "--context", "20", "--steps", "2",
            "--prefill-chunk", "20", "--cpu"]
    assert serving_profile.main(argv) == 0
    out = capsys.readouterr().out
    spans = re.search(r"decode step: build ([\d.]+) ms, submit ([\d.]+) ms, wait ([\d.]+) ms, total ([\d.]+) ms", out)
    assert spans is not None, out
    build, submit, wait, total = map(float, spans.groups())
    assert total > 0 and abs(build + submit + wait - total) < 0.05 * total + 0.02
    graph = re.search(r"graph of one decode step: (\d+) nodes, ([\d.]+) per layer: (.*)", out)
    assert graph is not None, out
    counts = dict(re.findall(r"(\w+) (\d+)", graph.group(3)))
    assert int(graph.group(1)) == sum(map(int, counts.values()))
    # Both layers write their K and V rows (one scatter per tensor) and attend once over the pages.
    assert counts["PagedAttention"] == "2" and counts["Scatter"] == "4"
