"""Kernel times from the GPU's own clock: CUPTI tracing through PyTorch's profiler.

CUPTI records every kernel the process launches, MLX's as well as torch's,
with GPU start and end timestamps, so a chain of calls can be split into the
time its kernels ran (busy) and the time between them. Wall-clock timing of
a chain cannot: when the host is the slower side, the wall clock measures
the host.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable

Event = tuple[str, float, float]  # (kernel name, start us, end us)


def available() -> bool:
    """Whether torch's profiler (and so CUPTI) can be used here."""
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def kernel_events(run: Callable[[], None]) -> list[Event]:
    """(name, start_us, end_us) of every GPU kernel that `run` launched, in start order."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
    found = [(e.name, e.time_range.start, e.time_range.end) for e in prof.events()
             if e.device_type == DeviceType.CUDA and e.time_range.end > e.time_range.start]
    return sorted(found, key=lambda e: e[1])


def summarize(events: list[Event], calls: int) -> dict[str, Any]:
    """Per call: summed kernel time (busy), the time at least one kernel ran (occupied), first start to
    last end (span), and each kernel's share.

    Busy counts kernels that ran at the same time once each; occupied counts
    that time once. They differ where a graph runs independent nodes side by
    side, as MLX does with an output's fill, which waits on nothing: the
    fills of a whole chain run together at its start (H200: at
    B 16 x 4096 they summed to 8.6 us per call beside a 70.9 us walk).
    """
    if not events:
        return {"kernels": {}, "busy_us": None, "occupied_us": None, "span_us": None}
    per_name: dict[str, list[float]] = defaultdict(list)
    for name, start, end in events:
        per_name[name].append(end - start)
    kernels = {name: {"per_call": len(d) / calls, "mean_us": sum(d) / len(d)} for name, d in per_name.items()}
    busy = sum(end - start for _, start, end in events) / calls
    span = (events[-1][2] - events[0][1]) / calls
    return {"kernels": kernels, "busy_us": busy, "occupied_us": occupied(events) / calls, "span_us": span}


def occupied(events: list[Event]) -> float:
    """Microseconds during which at least one of `events` (in start order) ran: their intervals' union."""
    total, begin, end = 0.0, None, None
    for _, start, stop in events:
        if end is None or start > end:
            if end is not None:
                total += end - begin
            begin, end = start, stop
        else:
            end = max(end, stop)
    return total if end is None else total + end - begin


def most_at_once(events: list[Event]) -> int:
    """The largest number of `events` running at one instant; one ending as another starts do not overlap."""
    edges = sorted([(start, 1) for _, start, _ in events] + [(end, -1) for _, _, end in events])
    running = most = 0
    for _, step in edges:  # at a tie the end (-1) sorts before the start (+1)
        running += step
        most = max(most, running)
    return most


def occupied_seconds(summary: dict[str, Any]) -> float:
    """A summary's occupied time per call in seconds; NaN when the trace saw no kernel."""
    found = summary["occupied_us"]
    return float("nan") if found is None else found / 1e6
