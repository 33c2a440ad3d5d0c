"""Splitting submissions across machines: `--shard i/n` keeps the names whose stable hash falls in shard i.

The hash is sha256 of the name, so the split depends on nothing but the name:
every machine agrees without talking, and adding a submission never moves
another one to a different shard. Shards are numbered 1..n.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

# Written by a --shard run into its output: which shard it graded, and of which submissions (all of them, before
# the split), so that `grade merge` can tell a missing shard or shards cut differently.
MANIFEST = "shard.json"


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based
    count: int

    def __post_init__(self) -> None:
        if self.count < 1 or not 1 <= self.index <= self.count:
            raise ValueError(f"shard={self.index}/{self.count} must be i/n with 1 <= i <= n")

    def holds(self, name: str) -> bool:
        return shard_of(name, self.count) == self.index

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def shard_of(name: str, count: int) -> int:
    """The 1-based shard that `name` belongs to among `count` shards."""
    value = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big")
    return value % count + 1


def write_manifest(out: Path, shard: Shard, names: list[str]) -> None:
    from pagecheck.grading.results_store import write_json_atomic

    write_json_atomic(out / MANIFEST, {"shard": str(shard), "names": sorted(names)})


def expected_names(directories: list[Path]) -> frozenset[str] | None:
    """Every submission the shard runs in `directories` were given, None where none of them has a manifest.
    ValueError where their manifests disagree (shards cut into different counts, runs given other submissions)
    or a shard of the count is missing, naming the submissions it holds."""
    found: dict[Path, tuple[Shard, frozenset[str]]] = {}
    for directory in directories:
        path = directory / MANIFEST
        if not path.is_file():
            continue
        try:
            manifest = json.loads(path.read_text())
            found[directory] = (parse_shard(manifest["shard"]), frozenset(str(n) for n in manifest["names"]))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path} cannot be read as a shard manifest ({exc})") from None
    if not found:
        return None
    (first, (shard, names)), *rest = found.items()
    for directory, (other, other_names) in rest:
        if other.count != shard.count:
            raise ValueError(f"shard {other} in {directory} and shard {shard} in {first} were cut into different "
                             "counts: merge the shards of one run")  # fmt: skip
        if other_names != names:
            raise ValueError(f"the runs of {first} and {directory} were given different submissions "
                             f"({sorted(names ^ other_names)[:5]} in one only): merge the shards of one run")  # fmt: skip
    missing = sorted(set(range(1, shard.count + 1)) - {s.index for s, _ in found.values()})
    if missing:
        held = sorted(n for n in names if shard_of(n, shard.count) in missing)
        raise ValueError(f"shard{'s' if len(missing) > 1 else ''} {', '.join(f'{i}/{shard.count}' for i in missing)} "
                         f"{'are' if len(missing) > 1 else 'is'} missing: no result for {held}")  # fmt: skip
    return names


def parse_shard(text: str) -> Shard:
    index, sep, count = text.partition("/")
    # isascii: str.isdigit also takes digits int() refuses, such as a superscript two.
    if not sep or not all(part.strip().isascii() and part.strip().isdigit() for part in (index, count)):
        raise ValueError(f"shard={text!r} must look like i/n, e.g. 1/4")
    return Shard(int(index), int(count))
