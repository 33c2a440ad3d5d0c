"""An interrupt that keeps what finished: how the benchmarks and sweeps hand their finished part to a command."""

from __future__ import annotations

from typing import Any


class PartialRun(KeyboardInterrupt):
    """An interrupt (Ctrl-C, SIGTERM) during a run of many measurements, carrying what finished: `partial` is the
    run's result over its finished measurements, `finished` and `planned` count them. It is a KeyboardInterrupt,
    so a caller that keeps nothing still stops as at any interrupt."""

    def __init__(self, partial: Any, finished: int, planned: int, unit: str = "timed runs") -> None:
        super().__init__(f"interrupted after {finished} of {planned} {unit}")
        self.partial = partial
        self.finished = finished
        self.planned = planned

    @property
    def record(self) -> dict[str, int]:
        """The "interrupted" record of a report document (common.schema.json): finished and planned."""
        return {"finished": self.finished, "planned": self.planned}
