"""Line and bar charts written as plain SVG, so reports need no plotting library.

Both axes of a line chart may be logarithmic; x ticks sit on the measured x
values (the contexts of a benchmark) when there are few of them, y ticks on
1-2-5 steps. A series may carry a shaded band (an interquartile range) and
whiskers (a min..max range) around its line; horizontal reference lines mark
a threshold (1.0 = the edge of a tolerance, no change in a ratio). Every
drawn element carries a `class` (series, band, whisker, reference, bar) and a
`<title>` naming what it shows, so a reader can hover over it and a test can
find it.
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
LEGEND_ROW = 16  # pixels per legend row
LEGEND_ROWS = 4  # legend rows that fit in MARGIN_BOTTOM
BAR_PITCH = 26
MAX_BAR_TICKS = 6  # pixels per bar of a horizontal bar chart


# A vertical range at one x: (x, low, high).
Range = tuple[float, float, float]


@dataclass(frozen=True)
class Series:
    name: str
    points: list[tuple[float, float]]
    # Shaded between low and high, joined from one x to the next (an interquartile range).
    band: tuple[Range, ...] = ()
    # A vertical line from low to high at each x, with caps (a min..max range).
    whiskers: tuple[Range, ...] = ()
    dashed: bool = False
    # A PALETTE index shared by related series (one colour per dtype); default: the series' position.
    colour: int | None = None


@dataclass(frozen=True)
class ReferenceLine:
    """A horizontal line across the plot at `y`, labelled at its right end."""

    y: float
    label: str


@dataclass(frozen=True)
class Bar:
    label: str
    value: float


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


def _frame(height: float, title: str, subtitle: str | None) -> list[str]:
    """The opening of a chart: the svg element, a white background, the title and the subtitle."""
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="Helvetica, Arial, sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
        f'<text x="{WIDTH / 2}" y="20" text-anchor="middle" font-size="15" font-weight="bold">{escape(title)}</text>',
    ]
    if subtitle:
        out.append(f'<text x="{WIDTH / 2}" y="37" text-anchor="middle" fill="#555">{escape(subtitle)}</text>')
    return out


def _empty_chart(title: str, subtitle: str, names: list[str]) -> str:
    """A chart with nothing measured (every run of every series failed): the title, and a note naming the
    series, in place of the plot."""
    out = _frame(HEIGHT / 2, title, subtitle)
    out.append(f'<text class="empty" x="{WIDTH / 2}" y="{HEIGHT / 4 + 10}" text-anchor="middle" fill="#b00">'
               f"nothing to plot: no measurement of {escape(', '.join(names) or 'any series')}; the report says why"
               "</text>")  # fmt: skip
    out.append("</svg>")
    return "\n".join(out) + "\n"


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
    reference_lines: tuple[ReferenceLine, ...] = (),
) -> str:
    drawn = [s for s in series if s.points]
    if not drawn:
        return _empty_chart(title, subtitle, [s.name for s in series])
    xs = [x for s in drawn for x, _ in s.points]
    ys = [y for s in drawn for _, y in s.points]
    ys += [v for s in drawn for _, low, high in (*s.band, *s.whiskers) for v in (low, high)]
    ys += [line.y for line in reference_lines]
    left, right = MARGIN_LEFT, WIDTH - MARGIN_RIGHT
    top, bottom = MARGIN_TOP, HEIGHT - MARGIN_BOTTOM
    x_ticks = sorted(set(xs)) if len(set(xs)) <= MAX_X_TICKS else nice_ticks(min(xs), max(xs), x_log)
    y_ticks = nice_ticks(min(ys), max(ys), y_log)
    # The outer ticks bound the plot, so every point sits inside the labelled grid.
    y_low, y_high = y_ticks[0], y_ticks[-1]
    pad = 0.04 * (right - left)
    x_axis = Axis(min(xs), max(xs), left + pad, right - pad, x_log)
    y_axis = Axis(y_low, y_high, bottom, top, y_log)
    # The bottom margin holds LEGEND_ROWS legend rows; more series make the picture taller.
    height = HEIGHT + LEGEND_ROW * max(0, len(drawn) - LEGEND_ROWS)

    out = _frame(height, title, subtitle)
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
    for line in reference_lines:
        y = y_axis(line.y)
        out.append(
            f'<line class="reference" x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#333" '
            f'stroke-dasharray="6 4"><title>{escape(line.label)}</title></line>'
        )
        out.append(f'<text x="{right - 4}" y="{y - 5:.1f}" text-anchor="end" fill="#333">{escape(line.label)}</text>')
    # Data: bands first, so lines and whiskers stay visible on top of every band.
    for index, s in enumerate(drawn):
        if len(s.band) >= 2:
            out.append(_band(s, x_axis, y_axis, _colour(s, index)))
    for index, s in enumerate(drawn):
        colour, shape = _colour(s, index), MARKERS[index % len(MARKERS)]
        out.extend(_whisker(s.name, r, x_axis, y_axis, colour) for r in s.whiskers)
        points = sorted(s.points)
        path = " ".join(f"{x_axis(x):.1f},{y_axis(y):.1f}" for x, y in points)
        dash = ' stroke-dasharray="7 4"' if s.dashed else ""
        out.append(
            f'<polyline class="series" points="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash}>'
            f"<title>{escape(s.name)}</title></polyline>"
        )
        out.extend(_marker(shape, x_axis(x), y_axis(y), colour) for x, y in points)
    # Legend below the plot, one row per series, so long names never cover data.
    for index, s in enumerate(drawn):
        colour, shape = _colour(s, index), MARKERS[index % len(MARKERS)]
        y = bottom + 56 + LEGEND_ROW * index
        dash = ' stroke-dasharray="7 4"' if s.dashed else ""
        out.append(
            f'<line x1="{left}" y1="{y - 4}" x2="{left + 28}" y2="{y - 4}" stroke="{colour}" stroke-width="2"{dash}/>'
        )
        out.append(_marker(shape, left + 14, y - 4, colour))
        out.append(f'<text x="{left + 36}" y="{y}">{escape(s.name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _colour(series: Series, index: int) -> str:
    return PALETTE[(index if series.colour is None else series.colour) % len(PALETTE)]


def _band(series: Series, x_axis: Axis, y_axis: Axis, colour: str) -> str:
    """One polygon: along the highs from left to right, back along the lows."""
    ranges = sorted(series.band)
    upper = [f"{x_axis(x):.1f},{y_axis(high):.1f}" for x, _, high in ranges]
    lower = [f"{x_axis(x):.1f},{y_axis(low):.1f}" for x, low, _ in reversed(ranges)]
    return (
        f'<polygon class="band" points="{" ".join(upper + lower)}" fill="{colour}" fill-opacity="0.18" stroke="none">'
        f"<title>{escape(series.name)}: interquartile range</title></polygon>"
    )


def _whisker(name: str, span: Range, x_axis: Axis, y_axis: Axis, colour: str) -> str:
    x, low, high = span
    px, y_low, y_high = x_axis(x), y_axis(low), y_axis(high)
    cap = 4.0
    path = (
        f"M{px - cap:.1f},{y_low:.1f} H{px + cap:.1f} M{px:.1f},{y_low:.1f} V{y_high:.1f} "
        f"M{px - cap:.1f},{y_high:.1f} H{px + cap:.1f}"
    )
    return (
        f'<path class="whisker" d="{path}" stroke="{colour}" stroke-width="1.2" fill="none">'
        f"<title>{escape(name)} at {x:g}: {low:g} to {high:g}</title></path>"
    )


def bar_chart(
    bars: list[Bar],
    *,
    title: str,
    value_label: str,
    horizontal: bool = False,
    value_max: float | None = None,
    value_format: Callable[[float], str] = lambda v: f"{v:g}",
    category_label: str = "",
    subtitle: str = "",
    integer_values: bool = False,
) -> str:
    """Bars from 0 to each value on a linear axis; horizontal bars keep long category labels readable.

    The value axis runs from 0 to `value_max` (default: a little above the
    largest value, rounded up to a tick; whole-number ticks for counts);
    each bar is labelled with its value.
    """
    if not bars:
        raise ValueError("bars is empty: there is nothing to plot")
    if any(bar.value < 0 or not math.isfinite(bar.value) for bar in bars):
        raise ValueError(f"bar values must be finite and >= 0, got {[bar.value for bar in bars]}")
    # Headroom above the longest bar for its label, unless the axis has a natural end (a share's 1).
    top_value = value_max if value_max is not None else 1.15 * max(bar.value for bar in bars)
    ticks = bar_ticks(top_value if top_value > 0 else 1.0, integer=integer_values)
    label_width = 7 * max(len(bar.label) for bar in bars) + 16 if horizontal else 0
    left = max(MARGIN_LEFT, label_width)
    height = (MARGIN_TOP + 60 + BAR_PITCH * len(bars)) if horizontal else HEIGHT
    right, top, bottom = WIDTH - MARGIN_RIGHT, MARGIN_TOP, height - (50 if horizontal else 70)
    value_axis = Axis(0.0, ticks[-1], left, right, False) if horizontal else Axis(0.0, ticks[-1], bottom, top, False)
    out = _frame(height, title, subtitle)
    for tick in ticks:
        position = value_axis(tick)
        if horizontal:
            out.append(f'<line x1="{position:.1f}" y1="{top}" x2="{position:.1f}" y2="{bottom}" stroke="#e3e3e3"/>')
            out.append(f'<text x="{position:.1f}" y="{bottom + 16}" text-anchor="middle">{escape(value_format(tick))}</text>')
        else:
            out.append(f'<line x1="{left}" y1="{position:.1f}" x2="{right}" y2="{position:.1f}" stroke="#e3e3e3"/>')
            out.append(f'<text x="{left - 6}" y="{position + 4:.1f}" text-anchor="end">{escape(value_format(tick))}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" fill="none" stroke="#888"/>')
    slot = ((bottom - top) if horizontal else (right - left)) / len(bars)
    thickness = 0.7 * slot
    zero = value_axis(0.0)
    for index, bar in enumerate(bars):
        end = value_axis(bar.value)
        shown = escape(value_format(bar.value))
        tip = f"<title>{escape(bar.label)}: {shown}</title>"
        if horizontal:
            y = top + index * slot + (slot - thickness) / 2
            out.append(f'<rect class="bar" x="{zero:.1f}" y="{y:.1f}" width="{end - zero:.1f}" height="{thickness:.1f}" '
                       f'fill="{PALETTE[0]}">{tip}</rect>')  # fmt: skip
            out.append(f'<text x="{left - 6}" y="{y + thickness / 2 + 4:.1f}" text-anchor="end">{escape(bar.label)}</text>')
            out.append(f'<text x="{end + 4:.1f}" y="{y + thickness / 2 + 4:.1f}">{shown}</text>')
        else:
            x = left + index * slot + (slot - thickness) / 2
            out.append(f'<rect class="bar" x="{x:.1f}" y="{end:.1f}" width="{thickness:.1f}" height="{zero - end:.1f}" '
                       f'fill="{PALETTE[0]}">{tip}</rect>')  # fmt: skip
            out.append(f'<text x="{x + thickness / 2:.1f}" y="{bottom + 16}" text-anchor="middle">{escape(bar.label)}</text>')
            if bar.value > 0:
                out.append(f'<text x="{x + thickness / 2:.1f}" y="{end - 4:.1f}" text-anchor="middle">{shown}</text>')
    value_middle = (left + right) / 2 if horizontal else (top + bottom) / 2
    if horizontal:
        out.append(f'<text x="{value_middle}" y="{bottom + 36}" text-anchor="middle">{escape(value_label)}</text>')
    else:
        out.append(f'<text transform="translate(18 {value_middle}) rotate(-90)" text-anchor="middle">{escape(value_label)}</text>')
        if category_label:
            out.append(f'<text x="{(left + right) / 2}" y="{bottom + 40}" text-anchor="middle">{escape(category_label)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def bar_ticks(top: float, *, integer: bool) -> list[float]:
    """Ticks from 0 to the first 1-2-5 step at or above `top`, at most MAX_BAR_TICKS + 1 of them."""
    step = 10.0 ** (math.floor(math.log10(top)) - 1)
    while top / step > MAX_BAR_TICKS or (integer and step < 1):
        for factor in (2, 2.5, 2):  # 1 -> 2 -> 5 -> 10 per decade
            step *= factor
            if top / step <= MAX_BAR_TICKS and not (integer and step < 1):
                break
    count = math.ceil(top / step - 1e-9)
    return [round(step * i, 12) for i in range(count + 1)]


def stack_panels(panels: list[str]) -> str:
    """Charts from this module one below the other in one SVG, each panel in its own group."""
    if not panels:
        raise ValueError("panels is empty: there is nothing to stack")
    bodies, offset = [], 0
    for panel in panels:
        lines = panel.strip().splitlines()
        if not lines[0].startswith("<svg") or lines[-1] != "</svg>":
            raise ValueError("stack_panels takes the SVG text that line_chart or bar_chart returns")
        height = int(lines[0].split('height="', 1)[1].split('"', 1)[0])
        bodies.append(f'<g class="panel" transform="translate(0 {offset})">')
        bodies.extend(lines[1:-1])
        bodies.append("</g>")
        offset += height
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{offset}" '
        f'viewBox="0 0 {WIDTH} {offset}" font-family="Helvetica, Arial, sans-serif" font-size="12">'
    )
    return "\n".join([head, *bodies, "</svg>"]) + "\n"
