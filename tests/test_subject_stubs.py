"""Subjects written from the course's starter: stubs named per function, checkouts loaded without __init__.

These need no course folder (tests/test_course_starter.py runs the real starter where it is present).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import pagecheck.invariants.subject
from pagecheck.invariants.subject import load_subject

PARTLY_WRITTEN = '''
class TinyKvPagedPool:
    def __init__(self, page_size: int = 128):
        self.page_size = page_size

    @property
    def num_pages(self) -> int:
        pass

    @property
    def num_free_pages(self) -> int:
        return 0

    def allocate_page(self) -> int:
        """Hand out a page id."""

    def read_page(self, page_id: int):
        ...

    def write_page_slice(self, page_id, start, key, value) -> None:
        raise NotImplementedError

    def free_page(self, page_id: int) -> None:
        raise NotImplementedError("Week 3, Day 3")

    def helper(self) -> None:
        pass


class TinyKvPagedCache:
    def __init__(self, pool):
        self.pool = pool

    def materialize(self) -> None:
        pass

    def release(self) -> None:
        """Give the pages back."""


def paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale=None, mask=None):
    return "attended"
'''



def test_subject_loading_needs_only_the_standard_library() -> None:
    tree = ast.parse(Path(pagecheck.invariants.subject.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported - {"__future__"} <= set(sys.stdlib_module_names)


def test_each_stub_raises_not_implemented_naming_its_function(tmp_path: Path) -> None:
    source = tmp_path / "partly_written.py"
    source.write_text(PARTLY_WRITTEN)
    subject = load_subject(str(source))
    stubs = ("num_pages", "allocate_page", "read_page", "write_page_slice", "free_page")
    # An empty materialize may be right (nothing to materialize); an empty release never is.
    assert subject.stubs == (*(f"TinyKvPagedPool.{name}" for name in stubs), "TinyKvPagedCache.release")
    assert "not implemented: TinyKvPagedPool.num_pages" in subject.describe()
    pool = subject.get("TinyKvPagedPool")(page_size=4)
    assert pool.page_size == 4 and pool.num_free_pages == 0  # written code is untouched
    assert pool.helper() is None  # not part of the API: never replaced
    assert subject.get("paged_attention")(None, None, None, None, None, 4) == "attended"
    with pytest.raises(NotImplementedError, match=r"^TinyKvPagedPool\.num_pages not implemented"):
        _ = pool.num_pages
    calls = {
        "allocate_page": lambda: pool.allocate_page(),
        "read_page": lambda: pool.read_page(0),
        "write_page_slice": lambda: pool.write_page_slice(0, 0, None, None),
        "free_page": lambda: pool.free_page(0),
    }
    for name, call in calls.items():
        expected = rf"^TinyKvPagedPool\.{name} not implemented .*partly_written\.py:"
        with pytest.raises(NotImplementedError, match=expected):
            call()


def test_built_in_subjects_have_no_stubs() -> None:
    assert load_subject("impl").stubs == () and load_subject("reference").stubs == ()


def test_a_checkout_loads_when_its_package_init_needs_a_course_only_module(
    tmp_path: Path, isolated_imports: None
) -> None:
    package = tmp_path / "tiny-llm" / "src" / "tiny_llm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from .batch import *\nfrom .attention import *\n")
    (package / "batch.py").write_text("import a_course_only_module_nobody_installed\n")
    (package / "attention.py").write_text("from .helpers import scale\n\npaged_attention = lambda: scale\n")
    (package / "helpers.py").write_text("scale = 0.5\n")
    subject = load_subject(f"tiny-llm:{tmp_path / 'tiny-llm'}")
    assert subject.get("paged_attention")() == 0.5
    assert "tiny_llm.batch" not in sys.modules


def test_a_week3_module_that_needs_a_missing_module_is_a_subject_error(tmp_path: Path, isolated_imports: None) -> None:
    package = tmp_path / "tiny-llm" / "src" / "tiny_llm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "attention.py").write_text("import a_course_only_module_nobody_installed\n")
    with pytest.raises(pagecheck.invariants.subject.SubjectError, match="a_course_only_module_nobody_installed"):
        load_subject(f"tiny-llm:{tmp_path / 'tiny-llm'}")


def test_the_checkouts_extensions_folder_wins_over_another_extensions_package(
    tmp_path: Path, isolated_imports: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "site" / "extensions"
    elsewhere.mkdir(parents=True)
    (elsewhere / "__init__.py").write_text("")  # a regular package: it would win over a namespace folder
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    source = tmp_path / "tiny-llm" / "src"
    (source / "tiny_llm").mkdir(parents=True)
    (source / "tiny_llm" / "__init__.py").write_text("")
    (source / "tiny_llm" / "attention.py").write_text(
        "from extensions import tiny_llm_ext\n\npaged_attention = tiny_llm_ext.paged_attention\n"
    )
    (source / "extensions" / "tiny_llm_ext").mkdir(parents=True)
    extension = source / "extensions" / "tiny_llm_ext" / "__init__.py"
    extension.write_text("def paged_attention():\n    return 'built here'\n")
    subject = load_subject(f"tiny-llm:{tmp_path / 'tiny-llm'}")
    assert subject.get("paged_attention")() == "built here"
