"""The primitives of an MLX array's graph, counted by name (from mx.export_to_dot).

A serving step costs per graph node (pagecheck.gpu.node_cost), so the count
of each kind is what serving_profile --graph prints and what the structural
tests of the decode path hold.
"""

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
