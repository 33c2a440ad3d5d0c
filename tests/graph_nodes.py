"""The primitives of an MLX array's graph, counted by name (from mx.export_to_dot): what a structural test
of a graph-building path reads, since a serving step costs per node."""

from __future__ import annotations

import re
import tempfile
from collections import Counter
from pathlib import Path

import mlx.core as mx


def graph_primitives(*arrays: mx.array) -> Counter[str]:
    """Primitive name -> count over the not-yet-evaluated graph that produces `arrays`."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "graph.dot"
        mx.export_to_dot(str(path), *arrays)
        return Counter(re.findall(r'label ="([^"]*)"', path.read_text()))
