"""The envelope every report JSON shares, and where report files go.

Each JSON document starts with `schema_version` and `kind`; its shape is
fixed by reports/schema/<kind>.schema.json. Bump SCHEMA_VERSION whenever a
field is renamed, removed or changes meaning.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pagecheck.input_files import MIB, read_input_text

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


_UMASK = os.umask(0o022)
os.umask(_UMASK)


def write_json(path: Path, document: dict[str, Any]) -> None:
    """Write `document` to `path` whole or not at all: a process stopped mid-write leaves the earlier file."""
    # allow_nan=False: NaN is not JSON, and a report other tools cannot parse is useless.
    text = json.dumps(document, indent=2, allow_nan=False) + "\n"
    # A name of its own each time: two writers never share it, and nothing already there is in its way.
    descriptor, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        with os.fdopen(descriptor, "w") as file:
            with contextlib.suppress(OSError):  # a file system without modes (vfat) keeps its own
                os.fchmod(file.fileno(), 0o666 & ~_UMASK)  # as open() would make it, not mkstemp's 0600
            file.write(text)
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise


JSON_FILE_LIMIT = 64 * MIB  # an earlier run's report document is a few MiB at most


def read_json(path: Path) -> dict[str, Any]:
    """A report document a user names (--compare); a FIFO, a device or a file over JSON_FILE_LIMIT is an
    OSError, not a wait or an exhausted memory."""
    text = read_input_text(path, JSON_FILE_LIMIT)
    try:
        return json.loads(text)
    except RecursionError:  # a few MiB of [[[[... exhaust the parser's stack
        raise ValueError("its JSON is nested too deeply to be a report") from None


def subject_slug(spec: str) -> str:
    """A directory-safe short name for a subject spec: 'tests/mutants/x.py' -> 'x'."""
    name = spec.rstrip("/").split(":")[-1]
    name = Path(name).stem if name.endswith(".py") else Path(name).name or name
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.")
    return slug or "subject"


def default_report_dir(spec: str, now: datetime | None = None) -> Path:
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    return Path("reports") / f"{subject_slug(spec)}-{stamp}"
