"""The SVG writer's charts, parsed back with xml.etree: every series, band, whisker and bar is there and in range."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree

import pytest

from pagecheck.reports.render.svg_plot import (
    HEIGHT,
    MARGIN_BOTTOM,
    MARGIN_TOP,
    WIDTH,
    Bar,
    ReferenceLine,
    Series,
    bar_chart,
    line_chart,
    stack_panels,
)

SVG = "{http://www.w3.org/2000/svg}"


def parse(svg: str) -> ElementTree.Element:
    root = ElementTree.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    return root


def of_class(root: ElementTree.Element, name: str) -> list[ElementTree.Element]:
    return [element for element in root.iter() if element.get("class") == name]


def title(element: ElementTree.Element) -> str:
    found = element.find(f"{SVG}title")
    assert found is not None, ElementTree.tostring(element)
    return found.text or ""


def numbers(text: str) -> list[float]:
    return [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", text)]


def points_of(polyline: ElementTree.Element) -> list[tuple[float, float]]:
    values = numbers(polyline.get("points", ""))
    return list(zip(values[0::2], values[1::2]))


def whisker_ys(whisker: ElementTree.Element) -> list[float]:
    """The pixel y of every move (M x,y) and vertical line (V y) of a whisker's path."""
    path = whisker.get("d", "")
    return [float(y) for y in re.findall(r"M[-\d.]+,([-\d.]+)", path)] + [float(y) for y in re.findall(r"V([-\d.]+)", path)]


SPREAD = [
    Series(
        "fast",
        [(128.0, 10.0), (1024.0, 40.0), (4096.0, 150.0)],
        band=((128.0, 9.0, 11.0), (1024.0, 35.0, 45.0), (4096.0, 140.0, 170.0)),
        whiskers=((128.0, 8.0, 14.0), (1024.0, 30.0, 60.0), (4096.0, 120.0, 200.0)),
    ),
    Series(
        "slow",
        [(128.0, 100.0), (1024.0, 400.0), (4096.0, 1500.0)],
        band=((128.0, 90.0, 110.0), (1024.0, 380.0, 420.0), (4096.0, 1400.0, 1600.0)),
        whiskers=((128.0, 80.0, 130.0), (1024.0, 350.0, 500.0), (4096.0, 1300.0, 1900.0)),
        dashed=True,
    ),
]


def test_line_chart_draws_each_series_with_its_band_whiskers_and_legend() -> None:
    root = parse(line_chart(SPREAD, title="t", x_label="context", y_label="latency"))
    lines = of_class(root, "series")
    assert [title(line) for line in lines] == ["fast", "slow"]
    assert len(of_class(root, "band")) == 2
    assert len(of_class(root, "whisker")) == 6
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "fast" in texts and "slow" in texts and "context" in texts and "latency" in texts
    assert lines[1].get("stroke-dasharray") and not lines[0].get("stroke-dasharray")


def test_a_line_chart_with_nothing_measured_says_so_instead_of_failing() -> None:
    """Every run of every series failed (a context too large for memory): the picture still opens, with its
    title and a note naming the series, and no axes that would pretend to a scale."""
    root = parse(line_chart([Series("subject", []), Series("MLX SDPA", [])], title="latency", subtitle="B 1",
                            x_label="context", y_label="latency"))  # fmt: skip
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "latency" in texts and "B 1" in texts
    (note,) = of_class(root, "empty")
    assert note.text == "nothing to plot: no measurement of subject, MLX SDPA; the report says why"
    assert not of_class(root, "series") and "context" not in texts


def test_every_drawn_point_lies_inside_the_plot_and_inside_its_band() -> None:
    root = parse(line_chart(SPREAD, title="t", x_label="x", y_label="y"))
    bottom = HEIGHT - MARGIN_BOTTOM
    for line, band in zip(of_class(root, "series"), of_class(root, "band")):
        edges: dict[float, list[float]] = {}
        for x, y in points_of(band):
            edges.setdefault(x, []).append(y)
        for x, y in points_of(line):
            assert 0 <= x <= WIDTH and MARGIN_TOP - 0.1 <= y <= bottom + 0.1
            # At its own x the line runs between the band's upper edge (smaller pixel y) and its lower edge.
            upper, lower = sorted(edges[x])
            assert upper < y < lower
    whiskers = of_class(root, "whisker")
    assert whiskers
    for whisker in whiskers:
        assert all(MARGIN_TOP - 0.1 <= y <= bottom + 0.1 for y in whisker_ys(whisker))


def test_whiskers_span_their_range_in_pixels() -> None:
    root = parse(line_chart(SPREAD[:1], title="t", x_label="x", y_label="y", y_log=False))
    whisker = of_class(root, "whisker")[0]
    assert title(whisker) == "fast at 128: 8 to 14"
    line_y = dict(points_of(of_class(root, "series")[0]))
    ys = sorted(set(whisker_ys(whisker)))
    low_y, high_y = ys[-1], ys[0]  # pixel y grows downwards
    median_y = next(iter(line_y.values()))
    assert high_y < median_y < low_y


def test_reference_line_sits_at_its_value() -> None:
    series = [Series("ratio", [(1.0, 0.8), (2.0, 1.25)])]
    root = parse(line_chart(series, title="t", x_label="x", y_label="y", y_log=False,
                            reference_lines=(ReferenceLine(1.0, "no change"),)))  # fmt: skip
    reference = of_class(root, "reference")
    assert len(reference) == 1 and title(reference[0]) == "no change"
    (y_ref,) = {float(reference[0].get("y1")), float(reference[0].get("y2"))}
    (_, y_low), (_, y_high) = points_of(of_class(root, "series")[0])
    assert y_high < y_ref < y_low


def test_legend_grows_the_picture_instead_of_overflowing() -> None:
    many = [Series(f"s{i}", [(1.0, 1.0 + i), (2.0, 2.0 + i)]) for i in range(8)]
    root = parse(line_chart(many, title="t", x_label="x", y_label="y"))
    height = float(root.get("height"))
    assert height > HEIGHT
    legend_y = max(float(t.get("y")) for t in root.iter(f"{SVG}text") if (t.text or "").startswith("s"))
    assert legend_y < height


@pytest.mark.parametrize("horizontal", [False, True])
def test_bars_are_proportional_to_their_values(horizontal: bool) -> None:
    bars = [Bar("a", 1.0), Bar("b", 3.0), Bar("c", 0.0), Bar("d", 2.0)]
    root = parse(bar_chart(bars, title="t", value_label="count", horizontal=horizontal))
    drawn = of_class(root, "bar")
    assert [title(rect).split(":")[0] for rect in drawn] == ["a", "b", "c", "d"]
    sizes = [float(rect.get("width" if horizontal else "height")) for rect in drawn]
    assert all(size >= 0 for size in sizes)
    assert sizes[2] == 0
    assert sizes[1] == pytest.approx(3 * sizes[0], rel=0.02) and sizes[3] == pytest.approx(2 * sizes[0], rel=0.02)
    for rect in drawn:
        assert 0 <= float(rect.get("x")) and float(rect.get("x")) + float(rect.get("width")) <= WIDTH
        assert 0 <= float(rect.get("y")) and float(rect.get("y")) + float(rect.get("height")) <= float(root.get("height"))


def test_share_bars_end_at_their_fraction_of_the_axis() -> None:
    root = parse(bar_chart([Bar("x", 0.5), Bar("y", 1.0)], title="t", value_label="share", horizontal=True,
                           value_max=1.0, value_format=lambda v: f"{100 * v:.0f}%"))  # fmt: skip
    half, full = (float(rect.get("width")) for rect in of_class(root, "bar"))
    assert half == pytest.approx(full / 2, rel=0.01)
    assert {"0%", "100%"} <= {t.text for t in root.iter(f"{SVG}text")}


def test_bar_chart_rejects_what_it_cannot_draw() -> None:
    with pytest.raises(ValueError, match="empty"):
        bar_chart([], title="t", value_label="v")
    with pytest.raises(ValueError, match="finite and >= 0"):
        bar_chart([Bar("a", -1.0)], title="t", value_label="v")


def test_panels_stack_in_one_svg() -> None:
    first = line_chart(SPREAD[:1], title="one", x_label="x", y_label="y")
    second = bar_chart([Bar("a", 1.0)], title="two", value_label="v")
    root = parse(stack_panels([first, second]))
    panels = of_class(root, "panel")
    assert len(panels) == 2
    assert float(root.get("height")) == float(parse(first).get("height")) + float(parse(second).get("height"))
    assert len(of_class(panels[0], "series")) == 1 and len(of_class(panels[1], "bar")) == 1
