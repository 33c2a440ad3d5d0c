"""Per-submission results files: written atomically when a submission finishes, reused on a rerun.

OUT/results/<name>.json appears complete or not at all (written to a
temporary file in the same directory, then os.replace'd), so a grader killed
at any moment loses only the submissions it had not finished. A rerun reuses
a result when its submission's content digest and the run's settings are the
same; anything else is graded again.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from pagecheck.input_files import MIB, read_input_text

FORMAT = "pagecheck-grade"
VERSION = 3  # 2: each check carries its scope (course or beyond_course); 3: settings carry the grader's fingerprint
RESULTS_DIR = "results"
SCOREBOARD = "grades.md"  # written by every grade run, one that graded nothing included
RESULT_SCHEMA = "grade"  # reports/schema/grade.schema.json: one submission's result
RESULT_FILE_LIMIT = 64 * MIB  # one submission's result is tens of KiB; a shard from elsewhere may be anything


def write_text_atomic(path: Path, text: str) -> None:
    """Write `path` so that readers see the old file or the whole new one, never part of it. A file name that is
    not UTF-8 (a submission's folder) is written escaped (\\udcff), not an error after the grading."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    with open(temporary, "w", encoding="utf-8", errors="backslashreplace") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)


def write_json_atomic(path: Path, document: dict[str, Any]) -> None:
    # Sorted keys: the same document always gives the same bytes (merged shards are compared byte for byte).
    write_text_atomic(path, json.dumps(document, indent=2, sort_keys=True, allow_nan=False) + "\n")


def result_path(out: Path, name: str) -> Path:
    return out / RESULTS_DIR / f"{name}.json"


def _read_result(path: Path) -> tuple[dict[str, Any] | None, str]:
    """(the results document, "") or (None, why it is not one)."""
    try:
        document = json.loads(read_input_text(path, RESULT_FILE_LIMIT))
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: not JSON, or not UTF-8; RecursionError: deep
        return None, f"it cannot be read as JSON ({getattr(exc, 'strerror', None) or exc})"
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        return None, f"it is not a {FORMAT} document"
    if document.get("version") != VERSION:
        return None, f"it is a version {document.get('version')!r} result, this grader writes version {VERSION}"
    return document, ""


def load_result(path: Path) -> dict[str, Any] | None:
    """A results document, or None when the file is missing, unreadable or of another format."""
    return _read_result(path)[0]


def load_all_results(out: Path, regrading: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """Every finished result under `out`, sorted by submission name, each held to the result schema (a name, its
    checks...): one that breaks it (edited by hand, or from another machine) is a ValueError naming the file, before
    anything reads it. So is a file there that is no result of this grader (damaged, or of another version), which
    would otherwise drop a submission from the scoreboard without a word; but for the submissions in `regrading`,
    whose results the run writes anew."""
    from pagecheck.reports.schema_check import schema_errors

    documents = []
    directory = out / RESULTS_DIR
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        document, why = _read_result(path)
        if document is None:
            if path.stem in regrading:
                continue
            raise ValueError(f"result {path} is left unread: {why}. Grade that submission again (name it in this "
                             f"run) or move the file out of {directory}")  # fmt: skip
        problems = schema_errors(RESULT_SCHEMA, document)
        if problems:
            more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
            raise ValueError(f"result {path} does not follow {RESULT_SCHEMA}.schema.json: {'; '.join(problems[:3])}"
                             f"{more}; move it out of {directory} or delete it")  # fmt: skip
        documents.append(document)
    return sorted(documents, key=lambda d: d["name"])


def reuse_reason(document: dict[str, Any] | None, digest: str, settings: dict[str, Any]) -> str | None:
    """Why a finished result cannot be reused (None: it can)."""
    if document is None:
        return "not graded yet"
    if document.get("digest") != digest:
        return "the submission changed"
    if document.get("settings") != settings:
        return "the grading settings changed"
    return None
