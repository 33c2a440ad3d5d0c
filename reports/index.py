"""index.md: one screen that links every report file in a directory and sums them up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pagecheck.reports.render.index import render_index
from pagecheck.reports.document import DOCUMENT_KINDS, read_json


def read_documents(out: Path) -> dict[str, dict[str, Any]]:
    """The report documents present in `out`, by kind."""
    return {kind: read_json(out / f"{kind}.json") for kind in DOCUMENT_KINDS if (out / f"{kind}.json").exists()}


def write_index(out: Path) -> Path:
    path = out / "index.md"
    path.write_text(render_index(read_documents(out)))
    return path
