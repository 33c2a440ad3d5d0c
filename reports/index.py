"""index.md: one screen that links every report file in a directory and sums them up."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pagecheck.reports.render.bench import PLOT_FILE as BENCH_PLOT_FILE
from pagecheck.reports.render.bench_compare import COMPARE_PLOT_FILE
from pagecheck.reports.render.index import render_index
from pagecheck.reports.render.tolerance_plot import PLOT_FILE as TOLERANCE_PLOT_FILE
from pagecheck.reports.document import DOCUMENT_KINDS, read_json

# Every file a report run writes into its folder.
REPORT_FILES = (
    "index.md", "invariants.log", BENCH_PLOT_FILE, COMPARE_PLOT_FILE, TOLERANCE_PLOT_FILE,
    *(f"{kind}.{suffix}" for kind in DOCUMENT_KINDS for suffix in ("json", "md")),
)  # fmt: skip


def read_documents(out: Path) -> dict[str, dict[str, Any]]:
    """The report documents present in `out`, by kind."""
    return {kind: read_json(out / f"{kind}.json") for kind in DOCUMENT_KINDS if (out / f"{kind}.json").exists()}


def write_index(out: Path, unfinished: tuple[str, ...] = (), missing: tuple[str, ...] = ()) -> Path:
    """index.md over the documents in `out`; `unfinished` names the stages an interrupt stopped, `missing` the API
    names the subject lacks (whose checks could not run)."""
    path = out / "index.md"
    path.write_text(render_index(read_documents(out), unfinished, missing))
    return path


def set_aside_earlier_report(out: Path, files: tuple[str, ...] = REPORT_FILES) -> Path | None:
    """Move the files of an earlier report in `out` (those named in `files`) into a folder of their own inside
    it, named after when that report was made, so that this run's index reads this run's files only and
    nothing earlier is overwritten; the folder, or None when `out` held no report file."""
    present = [out / name for name in files if (out / name).is_file()]
    if not present:
        return None
    created = ""
    for path in present:
        if path.suffix == ".json":
            try:
                created = str(read_json(path).get("created", ""))
            except (OSError, ValueError, AttributeError):
                continue
            if created:
                break
    stamp = re.sub(r"[^0-9A-Za-z]+", "", created)[:15] or "undated"
    folder, number = out / f"earlier-{stamp}", 2
    while folder.exists():
        folder, number = out / f"earlier-{stamp}-{number}", number + 1
    folder.mkdir()
    for path in present:
        path.rename(folder / path.name)
    return folder
