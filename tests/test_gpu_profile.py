"""gpu_profile's pieces that need no GPU: shape parsing and the per-call summary."""

import argparse
import math

import pytest

from pagecheck.gpu import clock as gpu_clock

from pagecheck.gpu import profile as gpu_profile


def test_parse_shapes_reads_batch_by_context():
    assert gpu_profile.parse_shapes("64x4096, 16X16384") == [(64, 4096), (16, 16384)]


@pytest.mark.parametrize("text, names", [("64", "'64'"), ("0x128", "'0x128'"), ("4x100", "multiple of 128"),
                                         ("ax128", "'ax128'")])
def test_parse_shapes_names_the_bad_item(text, names):
    with pytest.raises(argparse.ArgumentTypeError, match=names):
        gpu_profile.parse_shapes(text)


def test_summarize_splits_busy_time_from_gaps():
    # Two calls, each a 10 us kernel and a 2 us kernel, with a 3 us gap between calls.
    events = [("attn", 0.0, 10.0), ("fill", 10.0, 12.0), ("attn", 15.0, 25.0), ("fill", 25.0, 27.0)]
    found = gpu_clock.summarize(events, calls=2)
    assert found["busy_us"] == pytest.approx(12.0)
    assert found["span_us"] == pytest.approx(13.5)
    assert found["kernels"]["attn"] == {"per_call": 1.0, "mean_us": 10.0}
    assert found["kernels"]["fill"] == {"per_call": 1.0, "mean_us": 2.0}


def test_summarize_counts_kernels_that_ran_together_once_in_occupied_time():
    # Two calls of a 10 us walk; both calls' 4 us fills ran together before the first walk, and one
    # 1 us link ran inside the first walk: busy sums all five, occupied is the union (0-4, 5-15, 16-26).
    events = [("fill", 0.0, 4.0), ("fill", 0.5, 4.0), ("attn", 5.0, 15.0), ("link", 6.0, 7.0), ("attn", 16.0, 26.0)]
    found = gpu_clock.summarize(events, calls=2)
    assert found["busy_us"] == pytest.approx((4.0 + 3.5 + 10.0 + 1.0 + 10.0) / 2)
    assert found["occupied_us"] == pytest.approx(24.0 / 2)
    assert gpu_clock.occupied_seconds(found) == pytest.approx(12e-6)


def test_occupied_time_of_disjoint_kernels_is_their_sum():
    events = [("a", 0.0, 1.0), ("b", 2.0, 5.0), ("c", 5.0, 6.0)]
    assert gpu_clock.occupied(events) == pytest.approx(5.0)
    assert gpu_clock.occupied([]) == 0.0


def test_most_at_once_counts_kernels_running_at_one_instant():
    # b and c both start inside a; d starts as c ends (not together); e runs alone.
    events = [("a", 0.0, 10.0), ("b", 1.0, 4.0), ("c", 2.0, 5.0), ("d", 5.0, 6.0), ("e", 20.0, 21.0)]
    assert gpu_clock.most_at_once(events) == 3
    assert gpu_clock.most_at_once([("a", 0.0, 1.0), ("b", 1.0, 2.0)]) == 1
    assert gpu_clock.most_at_once([]) == 0


def test_summarize_without_kernels_says_so():
    assert gpu_clock.summarize([], calls=3) == {"kernels": {}, "busy_us": None, "occupied_us": None, "span_us": None}
    assert math.isnan(gpu_clock.occupied_seconds(gpu_clock.summarize([], calls=3)))


def test_main_without_cuda_exits_2(capsys):
    import mlx.core as mx

    if mx.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert gpu_profile.main(["--shapes", "1x128"]) == 2
    assert "no CUDA device" in capsys.readouterr().out


def test_rows_report_the_gpu_clock_where_it_was_read():
    from pagecheck.gpu import bench as bench_gpu

    assert bench_gpu.kernel_time(50e-6, 60e-6) == (60e-6, "gpu")
    assert bench_gpu.kernel_time(50e-6, float("nan")) == (50e-6, "wall")


def test_chained_timing_runs_anywhere_and_leaves_the_gpu_clock_out_when_asked():
    import math

    import mlx.core as mx

    from pagecheck.gpu import bench as bench_gpu

    sets = [bench_gpu.make_set(1, 1, bench_gpu.PAGE_SIZE, mx.random.key(i)) for i in range(2)]
    assert bench_gpu.set_count(bench_gpu.kv_bytes_of(64, 16384)) == 2  # 4.3 GB of K/V per call
    per_call, chained, gpu = bench_gpu.time_mlx(
        lambda s, q: mx.fast.scaled_dot_product_attention(q, s.dense_k, s.dense_v, scale=0.1), sets,
        use_gpu_clock=False)
    assert per_call > 0 and math.isfinite(chained) and math.isnan(gpu)


def test_gpu_seconds_reads_the_traced_kernels_per_link(monkeypatch):
    import mlx.core as mx

    from pagecheck.gpu import bench as bench_gpu

    def traced(run):
        run()  # the chain is evaluated inside the trace
        return [("attn", 10.0 * i, 10.0 * i + 4.0) for i in range(5)]  # 4 us per link

    monkeypatch.setattr(gpu_clock, "kernel_events", traced)
    link = lambda previous, i: mx.ones((4,)) if previous is None else previous + 1  # noqa: E731
    assert bench_gpu.gpu_seconds(link, 5) == pytest.approx(4e-6)
    monkeypatch.setattr(gpu_clock, "kernel_events", lambda run: [])
    assert bench_gpu.gpu_chain(link, 5)["busy_us"] is None
    assert math.isnan(bench_gpu.gpu_seconds(link, 5))  # no kernel seen: no GPU-clock figure


def test_split_counts_are_bounded_by_the_planner_and_named():
    most = int(gpu_profile.ext.gpu_plan_constants()["max_splits"])
    assert gpu_profile.split_counts("splits")("16,1,16") == (16, 1)
    with pytest.raises(argparse.ArgumentTypeError, match=f"splits='0' must be in 1..{most}; 0 is not"):
        gpu_profile.split_counts("splits")("0")
    with pytest.raises(argparse.ArgumentTypeError, match=f"{most + 1} is not"):
        gpu_profile.split_counts("splits")(f"2,{most + 1}")


def test_pinned_split_variants_are_traced_beside_the_chosen_ones():
    names = gpu_profile.variants((1, 16))
    assert gpu_profile.split_variant(1) in names and gpu_profile.split_variant(16) in names
    assert "paged" in names and "mlx_sdpa" in names
    assert gpu_profile.split_variant(2) not in names


def test_pinned_split_plan_runs_the_split_decode_at_one_split():
    # The variant's pins: at B 16 x 1024 the planner alone runs one pass; pinned, the split decode with 1 split.
    from pagecheck.gpu import kernels as gpu_kernels
    import mlx.core as mx

    auto = gpu_kernels.launch_plan((16, 32, 1, 128), mx.bfloat16, 8, 128, 8)
    pinned = gpu_kernels.launch_plan((16, 32, 1, 128), mx.bfloat16, 8, 128, 8, schedule="paged_decode_split", splits=1)
    assert auto["schedule"] == "paged_decode" and (pinned["schedule"], pinned["splits"]) == ("paged_decode_split", 1)


def test_l2_resident_table_cycles_over_pages_that_fit_a_third_of_the_l2(monkeypatch):
    import mlx.core as mx

    from pagecheck.gpu import bench as bench_gpu

    s = bench_gpu.make_set(4, 1, 8 * bench_gpu.PAGE_SIZE, mx.random.key(0))  # 32 pages of K and V
    page_bytes = 2 * s.key_pages.nbytes // s.key_pages.shape[0]
    monkeypatch.setattr(bench_gpu, "l2_bytes", lambda: 3 * 5 * page_bytes + 7)  # a third holds 5 pages
    table = gpu_profile.l2_resident_table(s)
    assert table.shape == s.block_table.shape and table.dtype == mx.int32
    assert table.reshape(-1).tolist() == [i % 5 for i in range(32)]
    monkeypatch.setattr(bench_gpu, "l2_bytes", lambda: 1)  # smaller than one page: still one page
    assert set(gpu_profile.l2_resident_table(s).reshape(-1).tolist()) == {0}
    monkeypatch.setattr(bench_gpu, "l2_bytes", lambda: 2**40)  # larger than the pool: every page once
    assert sorted(gpu_profile.l2_resident_table(s).reshape(-1).tolist()) == list(range(32))


def test_pinned_split_variants_have_an_l2_resident_twin():
    names = gpu_profile.variants((2,))
    assert gpu_profile.split_variant(2, in_l2=True) == "paged[split decode, 2 splits, pages in L2]"
    assert gpu_profile.split_variant(2, in_l2=True) in names and "paged[pages in L2]" in names


def test_variant_names_keep_the_commas_inside_brackets():
    assert gpu_profile.variant_names("paged, paged[split decode, 2 splits, pages in L2],mlx_sdpa,") == [
        "paged", "paged[split decode, 2 splits, pages in L2]", "mlx_sdpa"]
