"""`pagecheck report` writes every file, and every JSON it writes follows its schema in reports/schema/."""

from __future__ import annotations

import copy
import json
import os
import re
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

import pytest

from pagecheck.cli import main
from pagecheck.exit_codes import ExitCode
from pagecheck.reports.document import KINDS, SCHEMA_VERSION
from pagecheck.reports.schema_check import schema_errors


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One small report on the built-in implementation: one invariant, the quick grid, two tiny contexts."""
    out = tmp_path_factory.mktemp("report")
    code = main([
        "report", "--quick", "--subject", "impl", "--invariant", "gqa_mapping", "--jobs", "0",
        "--contexts", "16,64", "--repeats", "1", "--out", str(out),
    ])  # fmt: skip
    assert code == ExitCode.OK, (out / "index.md").read_text()
    return out


def load(report: Path, kind: str) -> dict[str, Any]:
    return json.loads((report / f"{kind}.json").read_text())


def test_every_report_file_is_written(report: Path) -> None:
    expected = {"index.md", "invariants.log", "bench.svg", "tolerance.svg"} | {f"{k}.{ext}" for k in KINDS for ext in ("md", "json")}
    assert expected <= {p.name for p in report.iterdir()}


@pytest.mark.parametrize("kind", KINDS)
def test_json_follows_its_schema(report: Path, kind: str) -> None:
    document = load(report, kind)
    assert document["schema_version"] == SCHEMA_VERSION
    assert document["kind"] == kind
    assert schema_errors(kind, document) == []


@pytest.mark.parametrize("kind", KINDS)
def test_schema_rejects_a_document_missing_a_field_or_with_a_stray_one(report: Path, kind: str) -> None:
    document = load(report, kind)
    missing = copy.deepcopy(document)
    del missing["environment"]["mlx"]
    stray = {**copy.deepcopy(document), "unexpected": 1}
    assert schema_errors(kind, missing)
    assert schema_errors(kind, stray)


def test_documents_agree_with_the_run(report: Path) -> None:
    conformance, tolerance, bench = (load(report, kind) for kind in KINDS)
    assert [inv["id"] for inv in conformance["invariants"]] == ["gqa_mapping"]
    assert conformance["invariants"][0]["verdict"] == "pass"
    assert conformance["totals"]["checks"] == conformance["invariants"][0]["counts"]["total"] > 0
    assert tolerance["totals"]["rows"] == len(tolerance["rows"]) > 0
    assert bench["configuration"]["contexts"] == [16, 64]
    assert set(bench["medians_us"]) == set(bench["configuration"]["variants"])


def test_index_links_resolve_and_the_plot_is_svg(report: Path) -> None:
    index = (report / "index.md").read_text()
    links = re.findall(r"\]\(([^)]+)\)", index)
    assert {"conformance.md", "tolerance.md", "bench.md", "bench.svg", "tolerance.svg"} <= set(links)
    assert all((report / link).exists() for link in links)
    root = ElementTree.parse(report / "bench.svg").getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert len(root.findall("{http://www.w3.org/2000/svg}polyline")) == len(load(report, "bench")["configuration"]["variants"])
    tolerance = ElementTree.parse(report / "tolerance.svg").getroot()
    panels = [g for g in tolerance.iter("{http://www.w3.org/2000/svg}g") if g.get("class") == "panel"]
    assert len(panels) == 2  # one per oracle


def test_write_json_is_not_stopped_by_a_folder_where_its_temporary_file_once_went(tmp_path: Path) -> None:
    """A folder named .tolerance.json.partial (the one fixed temporary name) failed the run after the sweep, and
    nothing was written; the file is readable as open() makes files, and no temporary file is left."""
    from pagecheck.reports.document import read_json, write_json

    (tmp_path / ".tolerance.json.partial").mkdir()
    write_json(tmp_path / "tolerance.json", {"kind": "tolerance"})
    assert read_json(tmp_path / "tolerance.json") == {"kind": "tolerance"}
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tolerance.json.partial", "tolerance.json"]
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "tolerance.json").stat().st_mode & 0o777 == 0o666 & ~umask
