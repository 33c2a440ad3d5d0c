"""A line chart written as plain SVG, so reports need no plotting library.

Both axes may be logarithmic; x ticks sit on the measured x values (the
contexts of a benchmark) when there are few of them, y ticks on 1-2-5 steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from typing import Callable

# Okabe-Ito colours: distinguishable with the common colour-vision deficiencies.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9")
MARKERS = ("circle", "square", "diamond", "triangle")

WIDTH, HEIGHT = 760, 440
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 78, 24, 48, 112
MAX_X_TICKS = 12
MAX_Y_TICKS = 12


@dataclass(frozen=True)
class Series:
    name: str
    points: list[tuple[float, float]]


class Axis:
    """Maps data values to pixels along one axis, linearly or in log space."""

    def __init__(self, low: float, high: float, pixel_low: float, pixel_high: float, log: bool) -> None:
        if log and low <= 0:
            raise ValueError(f"log axis needs positive values, got minimum {low}")
        self.log = log
        self.low, self.high = (math.log10(low), math.log10(high)) if log else (low, high)
        if self.high == self.low:
            self.low, self.high = self.low - 0.5, self.high + 0.5
        self.pixel_low, self.pixel_high = pixel_low, pixel_high

    def __call__(self, value: float) -> float:
        v = math.log10(value) if self.log else value
        share = (v - self.low) / (self.high - self.low)
        return self.pixel_low + share * (self.pixel_high - self.pixel_low)


def nice_ticks(low: float, high: float, log: bool) -> list[float]:
    """Round tick values from the last one at or below `low` to the first at or above `high`.

    Log axes step 1-2-5 per decade, or whole decades when that would be
    more than MAX_Y_TICKS labels.
    """
    if log:
        first_decade, last_decade = math.floor(math.log10(low)), math.ceil(math.log10(high))
        for mantissas in ((1, 2, 5), (1,)):
            candidates = [m * 10.0**e for e in range(first_decade, last_decade + 1) for m in mantissas]
            start = max(i for i, t in enumerate(candidates) if t <= low * (1 + 1e-9))
            stop = min(i for i, t in enumerate(candidates) if t >= high * (1 - 1e-9))
            ticks = candidates[start : stop + 1]
            if len(ticks) <= MAX_Y_TICKS:
                break
        return ticks
    step = 10.0 ** math.floor(math.log10(max(high - low, 1e-12)))
    for factor in (1, 2, 5, 10):
        if (high - low) / (step * factor) <= MAX_Y_TICKS:
            step *= factor
            break
    first = math.floor(low / step) * step
    return [first + i * step for i in range(math.ceil((high - first) / step - 1e-9) + 1)]


def minor_ticks(ticks: list[float]) -> list[float]:
    """Unlabelled grid lines at 2..9 of each decade, when the labels are whole decades."""
    if len(ticks) < 2 or any(not f"{t:e}".startswith("1") for t in ticks):
        return []
    return [m * t for t in ticks[:-1] for m in range(2, 10)]


def _marker(shape: str, x: float, y: float, colour: str) -> str:
    r = 4.0
    if shape == "circle":
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r}" fill="{colour}"/>'
    if shape == "square":
        return f'<rect x="{x - r:.1f}" y="{y - r:.1f}" width="{2 * r}" height="{2 * r}" fill="{colour}"/>'
    if shape == "diamond":
        pts = f"{x:.1f},{y - r - 1:.1f} {x + r + 1:.1f},{y:.1f} {x:.1f},{y + r + 1:.1f} {x - r - 1:.1f},{y:.1f}"
        return f'<polygon points="{pts}" fill="{colour}"/>'
    pts = f"{x:.1f},{y - r - 1:.1f} {x + r + 1:.1f},{y + r:.1f} {x - r - 1:.1f},{y + r:.1f}"
    return f'<polygon points="{pts}" fill="{colour}"/>'


def line_chart(
    series: list[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    x_log: bool = True,
    y_log: bool = True,
    x_format: Callable[[float], str] = lambda v: f"{v:g}",
    y_format: Callable[[float], str] = lambda v: f"{v:g}",
    subtitle: str = "",
) -> str:
    drawn = [s for s in series if s.points]
    if not drawn:
        raise ValueError("series has no points to plot")
    xs = [x for s in drawn for x, _ in s.points]
    ys = [y for s in drawn for _, y in s.points]
    left, right = MARGIN_LEFT, WIDTH - MARGIN_RIGHT
    top, bottom = MARGIN_TOP, HEIGHT - MARGIN_BOTTOM
    x_ticks = sorted(set(xs)) if len(set(xs)) <= MAX_X_TICKS else nice_ticks(min(xs), max(xs), x_log)
    y_ticks = nice_ticks(min(ys), max(ys), y_log)
    # The outer ticks bound the plot, so every point sits inside the labelled grid.
    y_low, y_high = y_ticks[0], y_ticks[-1]
    pad = 0.04 * (right - left)
    x_axis = Axis(min(xs), max(xs), left + pad, right - pad, x_log)
    y_axis = Axis(y_low, y_high, bottom, top, y_log)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="Helvetica, Arial, sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{WIDTH / 2}" y="20" text-anchor="middle" font-size="15" font-weight="bold">{escape(title)}</text>',
    ]
    if subtitle:
        out.append(f'<text x="{WIDTH / 2}" y="37" text-anchor="middle" fill="#555">{escape(subtitle)}</text>')
    # Grid and tick labels.
    for tick in minor_ticks(y_ticks) if y_log else []:
        y = y_axis(tick)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#f2f2f2"/>')
    for tick in y_ticks:
        y = y_axis(tick)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#e3e3e3"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(y_format(tick))}</text>')
    for tick in x_ticks:
        x = x_axis(tick)
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom}" stroke="#eeeeee"/>')
        out.append(f'<text x="{x:.1f}" y="{bottom + 16}" text-anchor="middle">{escape(x_format(tick))}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" fill="none" stroke="#888"/>')
    out.append(f'<text x="{(left + right) / 2}" y="{bottom + 36}" text-anchor="middle">{escape(x_label)}</text>')
    out.append(
        f'<text transform="translate(18 {(top + bottom) / 2}) rotate(-90)" text-anchor="middle">{escape(y_label)}</text>'
    )
    # Data.
    for index, s in enumerate(drawn):
        colour, shape = PALETTE[index % len(PALETTE)], MARKERS[index % len(MARKERS)]
        points = sorted(s.points)
        path = " ".join(f"{x_axis(x):.1f},{y_axis(y):.1f}" for x, y in points)
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        out.extend(_marker(shape, x_axis(x), y_axis(y), colour) for x, y in points)
    # Legend below the plot, one row per series, so long names never cover data.
    for index, s in enumerate(drawn):
        colour, shape = PALETTE[index % len(PALETTE)], MARKERS[index % len(MARKERS)]
        y = bottom + 56 + 16 * index
        out.append(f'<line x1="{left}" y1="{y - 4}" x2="{left + 28}" y2="{y - 4}" stroke="{colour}" stroke-width="2"/>')
        out.append(_marker(shape, left + 14, y - 4, colour))
        out.append(f'<text x="{left + 36}" y="{y}">{escape(s.name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
