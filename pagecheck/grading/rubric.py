"""The rubric: points per invariant, prerequisites, how partial runs score, and what anti-cheat findings cost.

The shipped default is default_rubric.toml next to this file; `--rubric PATH`
replaces it. The scoreboard is computed from results files and the rubric
at render time, so a changed rubric re-scores finished runs without rerunning them.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pagecheck.invariants.catalog import INVARIANTS

DEFAULT_RUBRIC = Path(__file__).resolve().parent / "default_rubric.toml"
SCORINGS = ("all-or-nothing", "fraction")
FINDING_KINDS = ("sdpa_call", "dense_gather", "sdpa_trap", "gather_trap", "project_import", "tamper")
ACTIONS = ("zero", "flag")


@dataclass(frozen=True)
class Rubric:
    points: dict[str, float]
    scoring: str
    anticheat: dict[str, str]
    source: str
    # invariant -> invariants that must also be met for it to earn points
    requires: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def points_for(self, invariant: str) -> float:
        if invariant not in self.points:
            raise ValueError(f"rubric {self.source} gives no points for invariant={invariant!r}")
        return self.points[invariant]

    def zeroes_total(self, finding_kinds: set[str]) -> bool:
        return any(self.anticheat[kind] == "zero" for kind in finding_kinds)


def _number(value: Any, field: str, source: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"rubric {source}: {field}={value!r} must be a non-negative number")
    return float(value)


def parse_rubric(document: dict[str, Any], source: str) -> Rubric:
    unknown = set(document) - {"scoring", "points", "anticheat", "requires"}
    if unknown:
        raise ValueError(f"rubric {source}: unknown keys {sorted(unknown)}")
    scoring = document.get("scoring", "all-or-nothing")
    if scoring not in SCORINGS:
        raise ValueError(f"rubric {source}: scoring={scoring!r} must be one of {SCORINGS}")
    table = document.get("points", {})
    bad = sorted(set(table) - set(INVARIANTS))
    if bad:
        raise ValueError(f"rubric {source}: points for {bad}, which are not invariants in invariants/catalog.py")
    points = {name: _number(value, f"points.{name}", source) for name, value in table.items()}
    actions = {kind: "zero" for kind in FINDING_KINDS}
    for kind, action in document.get("anticheat", {}).items():
        if kind not in FINDING_KINDS:
            raise ValueError(f"rubric {source}: anticheat.{kind} is not one of {FINDING_KINDS}")
        if action not in ACTIONS:
            raise ValueError(f"rubric {source}: anticheat.{kind}={action!r} must be one of {ACTIONS}")
        actions[kind] = action
    requires: dict[str, tuple[str, ...]] = {}
    for name, needed in document.get("requires", {}).items():
        if not isinstance(needed, list) or not all(isinstance(n, str) for n in needed):
            raise ValueError(f"rubric {source}: requires.{name}={needed!r} must be a list of invariant ids")
        wrong = sorted({name, *needed} - set(INVARIANTS))
        if wrong:
            raise ValueError(f"rubric {source}: requires.{name} names {wrong}, which are not invariants")
        requires[name] = tuple(needed)
    return Rubric(points=points, scoring=scoring, anticheat=actions, source=source, requires=requires)


def load_rubric(path: Path | None = None) -> Rubric:
    path = DEFAULT_RUBRIC if path is None else path
    try:
        document = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"rubric={str(path)!r} cannot be read: {exc}") from exc
    return parse_rubric(document, str(path))
