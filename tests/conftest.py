"""tests/: the session summary (the mutation score, counted from the reports, so it works under xdist) and
the fixtures several test files share."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

# float32 means float32 here: MLX's CUDA back-end runs float32 matmuls as TF32 by default (about 1e-3
# relative error, measured on the H200), which the float32 tolerances, derived from float32's precision,
# would read as wrong answers. Set before any test imports mlx; MLX_ENABLE_TF32=1 still overrides.
os.environ.setdefault("MLX_ENABLE_TF32", "0")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    verdicts: dict[str, bool] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            properties = dict(getattr(report, "user_properties", ()))
            if getattr(report, "when", None) == "call" and "mutant" in properties:
                verdicts[properties["mutant"]] = bool(properties.get("killed", False))
    if verdicts:
        killed = sum(verdicts.values())
        survivors = sorted(m for m, k in verdicts.items() if not k)
        line = f"mutation score: {killed}/{len(verdicts)} killed ({100 * killed / len(verdicts):.0f}%)"
        terminalreporter.write_line(line + (f"; survivors: {', '.join(survivors)}" if survivors else ""))


@pytest.fixture
def isolated_imports(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Loading a tiny-llm checkout adds tiny_llm, extensions and a sys.path entry; take them away afterwards."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.split(".")[0] in ("tiny_llm", "extensions"):
            del sys.modules[name]
