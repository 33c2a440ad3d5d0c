"""The stream probe's host side, on any machine (its kernel runs only with CUDA)."""

import math

import mlx.core as mx
import pytest

from pagecheck import ext
from pagecheck.gpu import kernels as gpu_kernels

from pagecheck.gpu import stream_probe as gpu_stream_probe


def test_the_probe_body_is_found_and_named_by_its_source() -> None:
    header, body = gpu_stream_probe.PROBE_SOURCE.read()
    assert "copy_tile_rows" in header and "bulk_copy_tile_rows" in header
    assert "checksum[" in body
    assert gpu_kernels.kernel_name(gpu_stream_probe.PROBE_SOURCE).startswith("pagecheck_paged_stream_")


def test_each_mode_asks_for_the_walk_ring_of_its_depth(monkeypatch) -> None:
    launches = []

    def fake_kernel(shared_bytes):
        def launch(**kwargs):
            launches.append((shared_bytes, dict(kwargs["template"]), kwargs["grid"]))
            return (mx.zeros(kwargs["output_shapes"][0]),)
        return launch

    monkeypatch.setattr(gpu_stream_probe, "probe_kernel", fake_kernel)

    class Pools:
        key_pages = value_pages = mx.zeros((4, 8, 128, 128), dtype=mx.bfloat16)

    table, lens = mx.zeros((2, 2), dtype=mx.int32), mx.full((2,), 256, dtype=mx.int32)
    for mode, stages in ((0, 3), (1, 2), (2, 3), (3, 3), (4, 3), (5, 3)):
        gpu_stream_probe.stream(Pools(), table, lens, mode, stages)
    swizzled = 4 * 3 * 2 * 16 * 128 * 2  # warps x stages x (K, V) x 16 rows x 128 bfloat16, unpadded
    padded = 4 * 3 * 2 * 16 * 136 * 2  # rows of 128 + 8 for bulk copies and mode 5
    assert [shared for shared, _, _ in launches] == [swizzled, padded * 2 // 3, 0, swizzled, padded, padded]
    # The same figures as the planner's for the tensor-core walk's ring.
    walk = {swizzle: ext.gpu_decode_shared_bytes(128, 16, "bfloat16", tensor_cores=True, mma_stages=3,
                                                 swizzled_rows=swizzle) for swizzle in (True, False)}
    assert (swizzled, padded) == (walk[True], walk[False])
    assert [t["MODE"] for _, t, _ in launches] == [0, 1, 2, 3, 4, 5]
    assert all(grid == (2 * 8 * 128, 1, 1) for _, _, grid in launches)  # a block of 4 warps per (request, kv head)


@pytest.mark.skipif(mx.cuda.is_available(), reason="checks the no-CUDA exit")
def test_without_cuda_it_says_so_and_exits_2(capsys) -> None:
    assert gpu_stream_probe.main(["--shapes", "1x128"]) == 2
    assert "no CUDA device" in capsys.readouterr().out


def test_a_ring_of_one_stage_is_refused() -> None:
    with pytest.raises(SystemExit):
        gpu_stream_probe.main(["--stages", "1"])


def test_the_probe_time_is_its_own_kernel_not_the_chain(monkeypatch) -> None:
    monkeypatch.setattr(gpu_stream_probe, "stream", lambda s, table, lens, mode, stages: mx.zeros((4,)))
    traced = {"kernels": {"copy_s<float>": {"per_call": 1.0, "mean_us": 3.0},
                          "custom_kernel_pagecheck_paged_stream_abc_bfloat16": {"per_call": 1.0, "mean_us": 250.0}}}
    monkeypatch.setattr(gpu_stream_probe.bench_gpu, "gpu_chain", lambda link, calls: traced)

    class Set:
        block_table = mx.zeros((1, 1), dtype=mx.int32)
        context_lens = mx.ones((1,), dtype=mx.int32)

    assert gpu_stream_probe.probe_us([Set()], False, 0, 3, 5) == 250.0
    del traced["kernels"]["custom_kernel_pagecheck_paged_stream_abc_bfloat16"]
    assert math.isnan(gpu_stream_probe.probe_us([Set()], False, 0, 3, 5))


def test_zero_calls_are_refused() -> None:
    with pytest.raises(SystemExit):
        gpu_stream_probe.main(["--calls", "0"])
