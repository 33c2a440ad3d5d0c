"""The settings one grading run applies to every submission, and the subset a finished result must match."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pagecheck.invariants.catalog import INVARIANTS, check_invariant_id
from pagecheck.grading.sandbox import Limits
from pagecheck.grading.seeds import fingerprint


@dataclass(frozen=True)
class GradePlan:
    secret: str
    limits: Limits  # for each suite pass
    build_timeout_s: float
    profile: str
    device: str
    selected: tuple[str, ...] = ()  # invariant ids; empty: all of them

    def __post_init__(self) -> None:
        for invariant in self.selected:
            check_invariant_id(invariant)
        if not self.build_timeout_s > 0:
            raise ValueError(f"build_timeout={self.build_timeout_s} must be a positive number of seconds")

    @property
    def invariants(self) -> list[str]:
        """The invariants graded, in catalog order."""
        return [name for name in INVARIANTS if not self.selected or name in self.selected]

    def settings(self) -> dict[str, Any]:
        """Everything that changes a result: a finished result with other settings is graded again."""
        return {
            "secret_fingerprint": fingerprint(self.secret),
            "invariants": self.invariants,
            "profile": self.profile,
            "device": self.device,
            "timeout_s": self.limits.timeout_s,
            "memory_bytes": self.limits.memory_bytes,
            "build_timeout_s": self.build_timeout_s,
        }
