"""The tolerance report's worst cell per oracle (each with its own allowance) and its plot."""

from __future__ import annotations

import copy
import xml.etree.ElementTree as ElementTree
from typing import Any

import pytest

from pagecheck.impl.attention import paged_attention
from pagecheck.reports.render.index import render_index
from pagecheck.reports.render.svg_plot import HEIGHT, MARGIN_BOTTOM, MARGIN_TOP
from pagecheck.reports.render.tolerance import worst_cell_lines
from pagecheck.reports.render.tolerance_plot import ALLOWANCE_CAP, ALLOWANCE_FLOOR, drawn_value, render_tolerance_plot
from pagecheck.bench.tolerance_sweep import SweepGrid, run_sweep, worst_for

SVG = "{http://www.w3.org/2000/svg}"
GRID = SweepGrid(dtypes=("float32", "bfloat16"), head_dims=(32,), page_sizes=(4,), query_lens=(1, 3), contexts=(5, 20, 60))
ENVELOPE = {"schema_version": 2, "kind": "tolerance", "created": "2026-01-01T00:00:00+00:00", "subject": "impl",
            "device": "cpu", "seed": 0, "profile": "quick",
            "environment": {"cpu": "cpu", "cpu_count": 2, "os": "os", "mlx": "0", "pagecheck": "0", "git": None}}  # fmt: skip


@pytest.fixture(scope="module")
def sweep() -> dict[str, Any]:
    document = dict(ENVELOPE)
    document.update(run_sweep(paged_attention, GRID, seed=3))
    document["plot"] = "tolerance.svg"
    return document


def with_allowances(document: dict[str, Any], used: list[tuple[float, float]]) -> dict[str, Any]:
    """A copy whose first rows used these (float64, mlx) allowances and the rest nothing."""
    changed = copy.deepcopy(document)
    for index, row in enumerate(changed["rows"]):
        reference, oracle = used[index] if index < len(used) else (0.0, 0.0)
        row["vs_reference"]["allowance_used"], row["vs_mlx_oracle"]["allowance_used"] = reference, oracle
    changed["worst"] = {oracle: worst_for(changed["rows"], oracle) for oracle in ("vs_reference", "vs_mlx_oracle")}
    return changed


def test_each_oracle_names_its_own_worst_cell_with_its_own_allowance(sweep: dict[str, Any]) -> None:
    document = with_allowances(sweep, [(0.9, 0.1), (0.2, 0.5)])
    assert document["worst"]["vs_reference"] == {"row": 0, "allowance_used": 0.9}
    assert document["worst"]["vs_mlx_oracle"] == {"row": 1, "allowance_used": 0.5}
    reference_line, oracle_line = worst_cell_lines(document)
    assert "float64 reference" in reference_line and "uses 0.900 of its allowance" in reference_line
    assert "mlx.core oracle" in oracle_line and "uses 0.500 of its allowance" in oracle_line
    assert "0.900" not in oracle_line and "0.500" not in reference_line
    index = render_index({"tolerance": document})
    assert reference_line in index and oracle_line in index


def test_a_cell_that_raised_is_the_worst_for_both_oracles(sweep: dict[str, Any]) -> None:
    document = with_allowances(sweep, [(0.9, 0.9)])
    last = document["rows"][-1]
    last.update(vs_reference=None, vs_mlx_oracle=None, passed=False, error="RuntimeError: boom")
    document["worst"] = {oracle: worst_for(document["rows"], oracle) for oracle in ("vs_reference", "vs_mlx_oracle")}
    assert document["worst"]["vs_reference"] == {"row": len(document["rows"]) - 1, "allowance_used": None}
    assert all("raised `RuntimeError: boom`" in line for line in worst_cell_lines(document))


def panels(svg: str) -> list[ElementTree.Element]:
    root = ElementTree.fromstring(svg)
    return [g for g in root.iter(f"{SVG}g") if g.get("class") == "panel"]


def test_the_plot_has_a_panel_per_oracle_and_a_line_per_dtype_and_path(sweep: dict[str, Any]) -> None:
    found = panels(render_tolerance_plot(sweep))
    assert len(found) == 2
    titles = [" ".join(t.text or "" for t in panel.iter(f"{SVG}text")) for panel in found]
    assert "float64 reference" in titles[0] and "mlx.core oracle" in titles[1]
    for panel in found:
        lines = [e for e in panel.iter() if e.get("class") == "series"]
        names = [e.find(f"{SVG}title").text for e in lines]
        assert names == ["float32 decode", "float32 prefill", "bfloat16 decode", "bfloat16 prefill"]
        for line in lines:
            points = [tuple(map(float, p.split(","))) for p in line.get("points").split()]
            assert len(points) == len(GRID.contexts)
            assert all(MARGIN_TOP - 0.1 <= y <= HEIGHT - MARGIN_BOTTOM + 0.1 for _, y in points)
        reference = [e for e in panel.iter() if e.get("class") == "reference"]
        assert len(reference) == 1


def test_the_plot_draws_the_worst_cell_per_context_clamped_to_the_log_axis(sweep: dict[str, Any]) -> None:
    assert drawn_value(0.0) == ALLOWANCE_FLOOR and drawn_value(float("inf")) == ALLOWANCE_CAP
    assert drawn_value(0.25) == 0.25
    # One prefill float32 cell far over the edge: its line's point at that context rises above the edge line.
    document = copy.deepcopy(sweep)
    target = next(i for i, r in enumerate(document["rows"]) if r["dtype"] == "float32" and r["path"] == "prefill")
    document["rows"][target]["vs_reference"]["allowance_used"] = 50.0
    panel = panels(render_tolerance_plot(document))[0]
    line = next(e for e in panel.iter() if e.get("class") == "series" and e.find(f"{SVG}title").text == "float32 prefill")
    edge_y = float(next(e for e in panel.iter() if e.get("class") == "reference").get("y1"))
    ys = [float(p.split(",")[1]) for p in line.get("points").split()]
    assert sum(y < edge_y for y in ys) == 1


def test_an_interrupted_sweep_keeps_its_finished_cells_and_does_not_pass(monkeypatch, tmp_path, capsys) -> None:
    """Ctrl-C or SIGTERM used to leave an empty folder after minutes of cells."""
    import json

    from pagecheck import cli
    from pagecheck.bench import tolerance_sweep
    from pagecheck.reports.schema_check import schema_errors

    real = tolerance_sweep.measure_cell
    calls = []

    def measure(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(tolerance_sweep, "measure_cell", measure)
    assert cli.main(["tolerance", "--quick", "--out", str(tmp_path)]) == 130
    assert "interrupted after 3 of 12 cells; tolerance.md keeps the cells that finished" in capsys.readouterr().err
    document = json.loads((tmp_path / "tolerance.json").read_text())
    assert len(document["rows"]) == document["totals"]["rows"] == 3 and document["totals"]["passed"] == 3
    assert document["interrupted"] == {"finished": 3, "planned": 12} and document["passed"] is False
    assert "INCOMPLETE: interrupted after 3 of 12 cells" in (tmp_path / "tolerance.md").read_text()
    assert "**INCOMPLETE:** interrupted after 3 of 12 cells" in (tmp_path / "index.md").read_text()
    pytest.importorskip("jsonschema")
    assert schema_errors("tolerance", document) == []
