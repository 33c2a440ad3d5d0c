"""The rubric: points per clause, prerequisites, how partial runs score, and what anti-cheat findings cost.

A grade holds two kinds of clause per invariant (invariants/course.py,
CLAUSE_SCOPES): its course clause, the checks that mirror the course's own
Day 3/4 tests, priced under [points]; and its clause beyond the course, the
checks no course test makes, priced under [beyond_course]. The two add up to
two totals, never one: a check stricter than the course can cost a clause
beyond the course, never a course clause, so an implementation the course
accepts keeps every course point.

The shipped default is default_rubric.toml next to this file; `--rubric PATH`
replaces it. The scoreboard is computed from results files and the rubric
at render time, so a changed rubric re-scores finished runs without rerunning them.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pagecheck.input_files import MIB, read_input_text
from pagecheck.invariants.catalog import INVARIANTS
from pagecheck.invariants.course import BEYOND_COURSE_MARK, CLAUSE_SCOPES, COURSE_MARK

DEFAULT_RUBRIC = Path(__file__).resolve().parent / "default_rubric.toml"
RUBRIC_FILE_LIMIT = MIB  # a rubric is a few hundred lines of TOML
SCORINGS = ("all-or-nothing", "fraction")
# Findings that enforce the course's own rule (its source check of paged_attention's text: no mx.fast,
# scaled_dot_product_attention or gather_dense), or that mean the work is not the student's (pagecheck's own
# code), and findings of rules the course does not make: SDPA or the dense helpers reached where that check
# does not read (a helper, an alias, native code, at run time), gathers of a request's pages by other means,
# reaching for the worker's objects.
COURSE_FINDINGS = ("sdpa_call", "dense_gather", "project_import")
BEYOND_FINDINGS = ("sdpa_route", "dense_route", "sdpa_trap", "page_join", "gather_trap", "tamper")
# Findings that say what the grader could not see, for a reviewer: flagged by default, costing no points.
REVIEW_FINDINGS = ("unscanned", "entry_unresolved")
FINDING_KINDS = (*COURSE_FINDINGS, *BEYOND_FINDINGS, *REVIEW_FINDINGS)
# zero: both totals become 0; zero-beyond: the total beyond the course becomes 0, course clauses keep their
# points; flag: listed on the scoreboard and in the feedback only.
ACTIONS = ("zero", "zero-beyond", "flag")
SCOPES = (COURSE_MARK, BEYOND_COURSE_MARK)
TABLES = {COURSE_MARK: "points", BEYOND_COURSE_MARK: "beyond_course"}  # scope -> its rubric table


@dataclass(frozen=True, order=True)
class Clause:
    invariant: str
    scope: str  # COURSE_MARK or BEYOND_COURSE_MARK

    @property
    def label(self) -> str:
        return self.invariant if self.scope == COURSE_MARK else f"{self.invariant} (beyond the course)"


def clauses_of(invariants: list[str], scope: str) -> list[Clause]:
    """The clauses of one scope that these invariants have, in the order given."""
    return [Clause(i, scope) for i in invariants if scope in CLAUSE_SCOPES[i]]


@dataclass(frozen=True)
class Rubric:
    points: dict[str, float]  # invariant -> its course clause's points
    scoring: str
    anticheat: dict[str, str]
    source: str
    # invariant -> invariants that must also be met for its clauses to earn points
    requires: dict[str, tuple[str, ...]] = field(default_factory=dict)
    beyond: dict[str, float] = field(default_factory=dict)  # invariant -> its clause beyond the course's points

    def points_for(self, clause: Clause) -> float:
        table = self.points if clause.scope == COURSE_MARK else self.beyond
        if clause.invariant not in table:
            raise ValueError(
                f"rubric {self.source} gives no points for invariant={clause.invariant!r} under "
                f"[{TABLES[clause.scope]}] (0 leaves the clause out of the total)"
            )
        return table[clause.invariant]

    def check_prices(self, invariants: list[str]) -> None:
        """ValueError unless every clause of these invariants has its points."""
        for scope in SCOPES:
            for clause in clauses_of(invariants, scope):
                self.points_for(clause)

    def needed_clause(self, clause: Clause, needed: str) -> Clause:
        """The clause of `needed` that `clause` waits for: the same scope; for a clause beyond the course,
        the course clause of an invariant that has none beyond it."""
        scopes = CLAUSE_SCOPES[needed]
        return Clause(needed, clause.scope if clause.scope in scopes else scopes[0])

    def zeroes(self, finding_kinds: set[str], scope: str) -> bool:
        """Whether these findings set this scope's total to 0."""
        actions = {self.anticheat[kind] for kind in finding_kinds}
        return "zero" in actions or (scope == BEYOND_COURSE_MARK and "zero-beyond" in actions)


MAX_POINTS = 1e6  # a clause's points: finite, so that totals, the scoreboard and its plots stay numbers


def _number(value: Any, field: str, source: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_POINTS:
        raise ValueError(f"rubric {source}: {field}={value!r} must be a number of points from 0 to {MAX_POINTS:g}")
    return float(value) + 0.0  # -0.0 becomes 0.0: the scoreboard showed "-0"


def _table(document: dict[str, Any], scope: str, source: str) -> dict[str, float]:
    name = TABLES[scope]
    table = document.get(name, {})
    if not isinstance(table, dict):
        raise ValueError(f"rubric {source}: [{name}] must be a table of invariant = points")
    bad = sorted(set(table) - set(INVARIANTS))
    if bad:
        raise ValueError(f"rubric {source}: {name} for {bad}, which are not invariants in invariants/catalog.py")
    for invariant in table:
        if scope not in CLAUSE_SCOPES[invariant]:
            other = TABLES[next(s for s in SCOPES if s != scope)]
            which = "mirrors a course test" if scope == COURSE_MARK else "goes beyond the course"
            raise ValueError(f"rubric {source}: {name}.{invariant}: no check of {invariant} {which}; "
                             f"its points belong under [{other}]")  # fmt: skip
    return {invariant: _number(value, f"{name}.{invariant}", source) for invariant, value in table.items()}


def _requires(document: dict[str, Any], source: str) -> dict[str, tuple[str, ...]]:
    requires: dict[str, tuple[str, ...]] = {}
    table = document.get("requires", {})
    if not isinstance(table, dict):
        raise ValueError(f"rubric {source}: [requires] must be a table of invariant = [invariant, ...]")
    for name, needed in table.items():
        if not isinstance(needed, list) or not all(isinstance(n, str) for n in needed):
            raise ValueError(f"rubric {source}: requires.{name}={needed!r} must be a list of invariant ids")
        wrong = sorted({name, *needed} - set(INVARIANTS))
        if wrong:
            raise ValueError(f"rubric {source}: requires.{name} names {wrong}, which are not invariants")
        beyond_only = [n for n in needed if COURSE_MARK not in CLAUSE_SCOPES[n]]
        if COURSE_MARK in CLAUSE_SCOPES[name] and beyond_only:
            raise ValueError(f"rubric {source}: requires.{name} names {beyond_only}, whose checks all go beyond "
                             f"the course; {name}'s course clause cannot wait for them")  # fmt: skip
        requires[name] = tuple(needed)
    return requires


def parse_rubric(document: dict[str, Any], source: str) -> Rubric:
    unknown = set(document) - {"scoring", "points", "beyond_course", "anticheat", "requires"}
    if unknown:
        raise ValueError(f"rubric {source}: unknown keys {sorted(unknown)}")
    scoring = document.get("scoring", "all-or-nothing")
    if scoring not in SCORINGS:
        raise ValueError(f"rubric {source}: scoring={scoring!r} must be one of {SCORINGS}")
    actions = {kind: "zero" if kind in COURSE_FINDINGS else "flag" if kind in REVIEW_FINDINGS else "zero-beyond"
               for kind in FINDING_KINDS}
    table = document.get("anticheat", {})
    if not isinstance(table, dict):
        raise ValueError(f"rubric {source}: [anticheat] must be a table of finding = action")
    for kind, action in table.items():
        if kind not in FINDING_KINDS:
            raise ValueError(f"rubric {source}: anticheat.{kind} is not one of {FINDING_KINDS}")
        if action not in ACTIONS:
            raise ValueError(f"rubric {source}: anticheat.{kind}={action!r} must be one of {ACTIONS}")
        actions[kind] = action
    return Rubric(
        points=_table(document, COURSE_MARK, source), scoring=scoring, anticheat=actions, source=source,
        requires=_requires(document, source), beyond=_table(document, BEYOND_COURSE_MARK, source),
    )  # fmt: skip


def load_rubric(path: Path | None = None) -> Rubric:
    path = DEFAULT_RUBRIC if path is None else path
    try:
        document = tomllib.loads(read_input_text(path, RUBRIC_FILE_LIMIT).removeprefix("\ufeff"))  # a BOM: editors
    except UnicodeDecodeError as exc:
        raise ValueError(f"rubric={str(path)!r} is not UTF-8 text: {exc.reason} at byte {exc.start}") from exc
    except OSError as exc:
        raise ValueError(f"rubric={str(path)!r} cannot be read: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"rubric={str(path)!r} is not valid TOML: {exc}") from exc
    except RecursionError:
        raise ValueError(f"rubric={str(path)!r} is nested too deeply to be a rubric") from None
    return parse_rubric(document, str(path))
