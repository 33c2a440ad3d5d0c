"""Running the course's own Week 3 Day 3/4 tests against a pagecheck subject.

The course's tests (github skyzh/tiny-llm, `tests_refsol/test_week_3_day_{3,4}.py`)
import everything from a sibling module `tiny_llm_base` and `assert_allclose`
from a sibling `utils`. `build_course_package` copies the two test files into a
fresh package next to a `tiny_llm_base.py` that takes the names from one
subject (loaded by `pagecheck.invariants.subject.load_subject`, the same spec strings as
`--subject`) and a `utils.py` holding the course's `assert_allclose` alone.
`run_course_tests` runs pytest on that package in a child process and returns
each test's outcome.

Where the course folder is: `$PAGECHECK_COURSE_DIR`, else `../shared/course`
next to this checkout.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx

REPO_ROOT = Path(__file__).resolve().parent.parent
COURSE_DIR_ENV = "PAGECHECK_COURSE_DIR"
DEFAULT_COURSE_DIR = REPO_ROOT.parent / "shared" / "course"
COURSE_TEST_FILES = ("test_week_3_day_3.py", "test_week_3_day_4.py")
COURSE_UTILS = "utils.py"
# The one helper the tests take from the course's utils.py (the rest of it needs huggingface_hub).
COURSE_HELPER = "assert_allclose"

PACKAGE = "course_tests"
SUBJECT_ENV = "PAGECHECK_COURSE_SUBJECT"
OUTCOMES_ENV = "PAGECHECK_COURSE_OUTCOMES"
CHILD_TIMEOUT_S = 600.0

# Tests outside pagecheck's API, deselected by name, with why. Everything else in the two files runs.
DESELECTED = {
    # Day 3: the course's Qwen3 model (Week 2/3 model classes, fused kernels), not the paged API.
    "test_week_3_day_3.py::test_task_1_model_kv_caches_share_storage_within_each_layer": "Qwen3ModelWeek3",
    "test_week_3_day_3.py::test_task_1_model_layer_caches_keep_independent_page_metadata": "Qwen3ModelWeek3",
    "test_week_3_day_3.py::test_task_3_week3_model_reuses_week2_fast_kernels": "Qwen3ModelWeek3, FastRMSNorm",
    "test_week_3_day_3.py::test_task_3_incremental_decode_matches_week2": "Qwen3ModelWeek2/3",
    # Day 4: a source check that paged_attention is the course's own code calling its extension.
    "test_week_3_day_4.py::test_paged_attention_is_course_owned": "course-ownership source check",
    # Day 4: the course's model and its quantized embedding.
    "test_week_3_day_4.py::test_task_3_incremental_decode_matches_week2_with_paged_attention": "Qwen3ModelWeek2/3",
    "test_week_3_day_4.py::test_week3_custom_embedding_matches_readable_path": "QuantizedEmbedding",
    "test_week_3_day_4.py::test_week3_default_inherits_week2_prefill_kernels": "Qwen3ModelWeek3",
}
# Names the course's tests import that only the deselected tests use.
OUTSIDE_API_NAMES = (
    "FastRMSNorm",
    "FastRoPE",
    "QuantizedEmbedding",
    "QuantizedWeights",
    "Qwen3ModelWeek2",
    "Qwen3ModelWeek3",
)
SUBJECT_NAMES = ("BatchingKvCache", "TinyKvPagedCache", "TinyKvPagedPool", "paged_attention")


class CourseFolderMissing(LookupError):
    """The course's tests are not next to this checkout (nor where $PAGECHECK_COURSE_DIR says)."""


def configured_course_dir() -> Path:
    """Where the course folder should be: $PAGECHECK_COURSE_DIR, else ../shared/course next to this checkout."""
    configured = os.environ.get(COURSE_DIR_ENV)
    return Path(configured).expanduser().resolve() if configured else DEFAULT_COURSE_DIR


def course_dir() -> Path:
    """The folder holding the course's two test files and utils.py, or CourseFolderMissing saying where it looked."""
    folder = configured_course_dir()
    missing = [name for name in (*COURSE_TEST_FILES, COURSE_UTILS) if not (folder / name).is_file()]
    if missing:
        raise CourseFolderMissing(f"the course's tests are not in {folder} (missing {', '.join(missing)})")
    return folder


def course_helper_source(utils: Path) -> str:
    """The course's assert_allclose, cut out of its utils.py, with the imports it needs."""
    text = utils.read_text()
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name == COURSE_HELPER:
            body = ast.get_source_segment(text, node)
            if body is not None:
                return f"import numpy as np\nimport mlx.core as mx\n\n\n{body}\n"
    raise ValueError(f"{utils} defines no {COURSE_HELPER}")


BASE_MODULE = f'''"""The course's tiny_llm_base for the pagecheck subject ${SUBJECT_ENV} (from tests/course_shim.py)."""

import os

from tests.course_shim import course_names

globals().update(course_names(os.environ["{SUBJECT_ENV}"]))
'''


def build_course_package(course: Path, root: Path) -> Path:
    """Write the package of the course's tests under `root` (which must exist); returns the package directory."""
    package = root / PACKAGE
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name in COURSE_TEST_FILES:
        shutil.copyfile(course / name, package / name)
    (package / "tiny_llm_base.py").write_text(BASE_MODULE)
    (package / "utils.py").write_text(course_helper_source(course / COURSE_UTILS))
    # An empty config makes `root` the rootdir, so no other pytest configuration applies.
    (root / "pytest.ini").write_text("[pytest]\n")
    return package


@dataclass(frozen=True)
class CourseRun:
    outcomes: dict[str, str]  # test id (file::name[params]) -> passed | failed | skipped
    messages: dict[str, str]  # test id -> the failure's one-line message
    deselected: list[str]
    log: str

    def count(self, outcome: str) -> int:
        return sum(1 for found in self.outcomes.values() if found == outcome)

    def counts(self) -> dict[str, int]:
        return {
            "passed": self.count("passed"),
            "failed": self.count("failed"),
            "skipped": self.count("skipped"),
            "deselected": len(self.deselected),
        }


def run_course_tests(course: Path, spec: str, root: Path) -> CourseRun:
    """Run the course's tests on subject `spec` in a child pytest; `root` is an empty scratch directory."""
    package = build_course_package(course, root)
    outcomes_path = root / "outcomes.json"
    env = {
        **os.environ,
        SUBJECT_ENV: spec,
        OUTCOMES_ENV: str(outcomes_path),
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p),
        # Only the plugins named below: nothing installed alongside changes how the course's tests run.
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    deselect = [arg for test in DESELECTED for arg in ("--deselect", f"{PACKAGE}/{test}")]
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.course_outcomes",
        "--rootdir", str(root), str(package.relative_to(root)), *deselect,
    ]  # fmt: skip
    child = subprocess.run(
        command, cwd=root, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False
    )
    log = child.stdout + child.stderr
    if not outcomes_path.is_file():
        raise RuntimeError(f"the course's tests wrote no outcomes (exit status {child.returncode}):\n{log}")
    recorded = json.loads(outcomes_path.read_text())
    prefix = f"{PACKAGE}/"
    return CourseRun(
        outcomes={test.removeprefix(prefix): outcome for test, outcome in recorded["outcomes"].items()},
        messages={test.removeprefix(prefix): text for test, text in recorded["messages"].items()},
        deselected=[test.removeprefix(prefix) for test in recorded["deselected"]],
        log=log,
    )


# -- the names tiny_llm_base exports ---------------------------------------------------------------------------


class DenseKvFullCache:
    """The course's TinyKvFullCache, written here as the tests' dense comparator: it concatenates each
    chunk [1, H_kv, S, D] onto the keys and values held so far."""

    def __init__(self) -> None:
        self.key_values: tuple[mx.array, mx.array] | None = None
        self.offset = 0

    def update_and_fetch(
        self, key: mx.array, value: mx.array, mask_length: int | None = None, mask: mx.array | str | None = None
    ) -> tuple[mx.array, mx.array, int, mx.array | str | None]:
        if self.key_values is None:
            self.key_values = (key, value)
        else:
            keys, values = self.key_values
            self.key_values = (mx.concatenate([keys, key], axis=2), mx.concatenate([values, value], axis=2))
        self.offset += key.shape[2]
        keys, values = self.key_values
        return keys, values, self.offset, mask

    def rewind(self, n: int) -> None:
        if not 0 <= n <= self.offset:
            raise ValueError(f"rewind n={n} must be in [0, offset={self.offset}]")
        if self.key_values is not None:
            keys, values = self.key_values
            self.key_values = (keys[:, :, : self.offset - n, :], values[:, :, : self.offset - n, :])
        self.offset -= n


class _Absent:
    """Stands for a name the tests import but cannot use here; using it raises AttributeError saying why."""

    def __init__(self, name: str, why: str) -> None:
        self._name, self._why = name, why

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise AttributeError(f"{self._name} is not available: {self._why}")

    def __getattr__(self, attribute: str) -> Any:
        raise AttributeError(f"{self._name}.{attribute} is not available: {self._why}")


def course_names(spec: str) -> dict[str, Any]:
    """Everything the course's tests import from tiny_llm_base: the subject's API, the dense comparators the
    tests check it against (ours, so a failure is the subject's), and stand-ins for the course's model."""
    from pagecheck.impl.dense_attention import scaled_dot_product_attention_grouped
    from pagecheck.invariants.subject import load_subject

    subject = load_subject(spec)
    names: dict[str, Any] = {
        name: subject.names[name] if subject.has(name) else _Absent(name, subject.missing[name])
        for name in SUBJECT_NAMES
    }
    names["TinyKvFullCache"] = DenseKvFullCache
    names["scaled_dot_product_attention_grouped"] = scaled_dot_product_attention_grouped
    for name in OUTSIDE_API_NAMES:
        names[name] = _Absent(name, "outside pagecheck's API (its tests are deselected)")
    return names
