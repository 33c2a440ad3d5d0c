"""The envelope every report JSON shares, and where report files go.

Each JSON document starts with `schema_version` and `kind`; its shape is
fixed by reports/schema/<kind>.schema.json. Bump SCHEMA_VERSION whenever a
field is renamed, removed or changes meaning.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 2
# What `pagecheck report` writes; `pagecheck bench --device gpu` adds bench_gpu on a CUDA machine.
KINDS = ("conformance", "tolerance", "bench")
DOCUMENT_KINDS = (*KINDS, "bench_gpu")


def new_document(kind: str, *, subject: str, device: str, seed: int | None, profile: str) -> dict[str, Any]:
    if kind not in DOCUMENT_KINDS:
        raise ValueError(f"kind={kind!r} is not one of {DOCUMENT_KINDS}")
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "subject": subject,
        "device": device,
        "seed": seed,
        "profile": profile,
    }


def write_json(path: Path, document: dict[str, Any]) -> None:
    # allow_nan=False: NaN is not JSON, and a report other tools cannot parse is useless.
    path.write_text(json.dumps(document, indent=2, allow_nan=False) + "\n")


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def subject_slug(spec: str) -> str:
    """A directory-safe short name for a subject spec: 'tests/mutants/x.py' -> 'x'."""
    name = spec.rstrip("/").split(":")[-1]
    name = Path(name).stem if name.endswith(".py") else Path(name).name or name
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.")
    return slug or "subject"


def default_report_dir(spec: str, now: datetime | None = None) -> Path:
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    return Path("reports") / f"{subject_slug(spec)}-{stamp}"
