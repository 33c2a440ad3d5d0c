"""pagecheck.gpu.node_cost on the CPU stream: every kind builds, runs and is reported; bad kinds are refused."""

import mlx.core as mx
import pytest

from pagecheck.gpu import node_cost


def test_each_cpu_kind_is_timed_in_one_row(capsys) -> None:
    with mx.stream(mx.cpu):
        kinds = ["view", "add", "page_write", "quantized_embedding", "paged_attention[op]", "prefill_attention[op]"]
        assert node_cost.main(["--nodes", "2", "--repeats", "1", "--kinds", ",".join(kinds)]) == 0
    rows = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()[2:]}
    assert sorted(rows) == sorted(kinds)
    for kind, cells in rows.items():
        build, submit, wait, total = map(float, cells)
        assert min(build, submit, wait) >= 0 and total == pytest.approx(build + submit + wait, abs=0.02), kind


def test_an_unknown_kind_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        node_cost.main(["--kinds", "add,flash"])
    assert exited.value.code == 2
    assert "unknown kinds ['flash']" in capsys.readouterr().err


def test_the_custom_kernel_kinds_exist_only_on_the_gpu() -> None:
    with mx.stream(mx.cpu):
        assert not any(kind.startswith("custom_kernel") for kind in node_cost._chains()) or mx.default_device() == mx.gpu
