"""`pagecheck grade merge DIR...`: one scoreboard from the output directories of several shards.

Results are copied into the merged directory unchanged, then the scoreboard
and feedback are rendered from them as a single run would, so merging the
shards of a run reproduces that run's grades.md and grades.csv byte for byte.
A submission graded in two shards, or shards graded with different settings,
is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pagecheck.input_files import resolve_path
from pagecheck.grading.results_store import (
    RESULTS_DIR,
    SCOREBOARD,
    load_all_results,
    result_path,
    write_json_atomic,
)


def resolved_shard(directory: Path) -> Path:
    try:
        return resolve_path(directory)
    except OSError as exc:
        raise ValueError(f"shard directory {str(directory)!r} {exc.strerror}") from None


def merge_results(shard_dirs: list[Path], out: Path) -> list[dict[str, Any]]:
    taken: dict[str, Path] = {}
    settings: tuple[Path, dict[str, Any]] | None = None
    merged: list[dict[str, Any]] = []
    named = [resolved_shard(directory) for directory in shard_dirs]
    repeated = sorted({str(d) for d in named if named.count(d) > 1})
    if repeated:
        raise ValueError(f"shard directory {', '.join(repeated)} is named more than once")
    for directory in shard_dirs:
        if not directory.is_dir():
            what = "is not a directory" if directory.exists() else "does not exist"
            raise ValueError(f"shard directory={str(directory)!r} {what}")
        if not (directory / RESULTS_DIR).is_dir() and not (directory / SCOREBOARD).is_file():
            # A shard that graded nothing still writes its scoreboard; a folder with neither is a wrong path.
            raise ValueError(f"shard directory={str(directory)!r} is not the output of a `pagecheck grade` run "
                             f"(it has no {RESULTS_DIR}/ and no {SCOREBOARD})")  # fmt: skip
        for document in load_all_results(directory):  # each held to the result schema, before anything is copied
            name = document["name"]
            if name in taken:
                raise ValueError(f"submission {name!r} is graded in both {taken[name]} and {directory}")
            if settings is None:
                settings = (directory, document["settings"])
            elif document["settings"] != settings[1]:
                ours, theirs = document["settings"], settings[1]
                differ = sorted(k for k in {*ours, *theirs} if ours.get(k) != theirs.get(k))
                shown = "; ".join(f"{k}: {ours.get(k)!r} against {theirs.get(k)!r}" for k in differ)
                raise ValueError(f"shard {directory} graded {name!r} with other settings than {settings[0]} ({shown})")
            taken[name] = directory
            merged.append(document)
    strangers = sorted({d["name"] for d in load_all_results(out)} - set(taken))
    if strangers:
        raise ValueError(f"out={str(out)!r} already holds results for {strangers}, which no shard has; merge into "
                         "an empty directory")  # fmt: skip
    for document in merged:
        write_json_atomic(result_path(out, document["name"]), document)
    return merged
