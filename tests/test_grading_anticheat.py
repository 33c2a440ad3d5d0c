"""The AST scan of a submission's paged attention."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pagecheck.grading.anticheat import scan_source, scan_submission

SIGNATURE = "def paged_attention(query, key_pages, value_pages, block_table, context_lens, page_size, scale=None, mask=None):"


def kinds(source: str) -> list[str]:
    return sorted(f.kind for f in scan_source(textwrap.dedent(source), "attention.py"))


@pytest.mark.parametrize(
    "source",
    [
        f"import mlx.core as mx\n{SIGNATURE}\n    return mx.fast.scaled_dot_product_attention(query, query, query, scale=1.0)\n",
        f"from mlx.core.fast import scaled_dot_product_attention as fused\n{SIGNATURE}\n    return fused(query, query, query, scale=1.0)\n",
        f"from mlx.core import fast\n{SIGNATURE}\n    return fast.scaled_dot_product_attention(query, query, query, scale=1.0)\n",
        # through a helper of the same file
        f"import mlx.core as mx\ndef _attend(q):\n    return mx.fast.scaled_dot_product_attention(q, q, q, scale=1.0)\n{SIGNATURE}\n    return _attend(query)\n",
    ],
    ids=["module-attribute", "imported-name", "fast-module", "helper"],
)
def test_fused_sdpa_in_paged_attention_is_found(source: str) -> None:
    """sdpa_call (the course's rule) only where paged_attention's own text names it, as the course's source
    check reads; sdpa_route (beyond the course) wherever a call reaches it."""
    course = ["sdpa_call"] if "scaled_dot_product_attention(query" in source else []
    assert kinds(source) == sorted([*course, "sdpa_route"])


@pytest.mark.parametrize(
    "body, found",
    [
        ("    # mx.fast is not used here\n    return query\n", ["sdpa_call"]),
        ("    return getattr(mx, 'fast').scaled_dot_product_attention.original(query)\n", ["sdpa_call"]),
        ("    return OPS['dense'](query)\n", []),
        ("    return query  # no gather_dense\n", ["dense_gather"]),
    ],
    ids=["a-comment", "an-attribute-past-the-call-scan", "through-a-dict", "gather_dense-named"],
)
def test_the_courses_source_check_reads_paged_attentions_text(body: str, found: list[str]) -> None:
    """The course's test fails paged_attention whose source text holds mx.fast, scaled_dot_product_attention or
    gather_dense, however it is written, and reads nothing else: a helper reached through a dict passes it."""
    source = f"import mlx.core as mx\nOPS = {{'dense': mx.fast.scaled_dot_product_attention}}\n{SIGNATURE}\n{body}"
    assert kinds(source) == found


DENSE_BODY = "    return scaled_dot_product_attention_grouped(query, key_pages, value_pages)  # also: mx.fast\n"
IMPL = SIGNATURE.replace("def paged_attention", "def _impl") + "\n" + DENSE_BODY
GROUPED = "from .attention import scaled_dot_product_attention_grouped\n"


@pytest.mark.parametrize(
    "source",
    [
        f"{GROUPED}{IMPL}paged_attention = _impl\n",
        f"{GROUPED}{IMPL}alias = _impl\npaged_attention = alias\n",
        f"{GROUPED}import functools\n{IMPL}paged_attention = functools.wraps(_impl)(_impl)\n",
        f"{GROUPED}paged_attention = lambda *a: scaled_dot_product_attention_grouped(*a)  # mx.fast\n",
        f"{GROUPED}try:\n    import nothing\nexcept ImportError:\n    if True:\n" + textwrap.indent(f"{SIGNATURE}\n{DENSE_BODY}", "        "),
        # U+2028 is a line break to str.splitlines, not to Python: 200 of them moved the window read 200 lines up
        f"{GROUPED}# {chr(0x2028) * 200}\n{SIGNATURE}\n{DENSE_BODY}",
        # inspect.getsource reads comments indented inside the body after its last statement
        f"{SIGNATURE}\n    return query\n    # then: mx.fast.scaled_dot_product_attention\n",
        # functools.wraps(f) makes inspect.getsource read f
        f"import functools\n{GROUPED}{IMPL}@functools.wraps(_impl)\n{SIGNATURE}\n    return query\n",
        f"{GROUPED}{IMPL}paged_attention = {{'metal': _impl}}['metal']\n",
    ],
    ids=["alias", "alias-of-alias", "wrapped", "lambda", "inside-try-and-if", "line-separators", "trailing-comment",
         "wraps", "the-one-function-a-dict-holds"],
)
def test_paged_attention_is_read_wherever_its_name_is_bound(source: str) -> None:
    """The course's check reads inspect.getsource(paged_attention): the function the name holds once the module ran,
    whatever it is called in its def (red team: `paged_attention = _impl` scored 80/80 with SDPA named in _impl)."""
    assert "sdpa_call" in kinds(source)


CLEAN = SIGNATURE.replace("def paged_attention", "def _clean") + "\n    return query\n"


@pytest.mark.parametrize(
    "binding",
    [
        "_IMPLS = {'clean': _clean, 'dense': _impl}\npaged_attention = _IMPLS['clean']\n",
        "paged_attention = _clean if True else _impl\n",
        "def _install():\n    global paged_attention\n    paged_attention = _impl\n_install()\n",
        "globals()['paged_attention'] = _impl\n",
        "import sys\nsys.modules[__name__].paged_attention = _impl\n",
        "exec('paged_attention = _impl')\n",
        "def __getattr__(name):\n    return _impl\n",
        "for paged_attention in (_impl,):\n    pass\n",
        "def _swap(f):\n    return _impl\n@_swap\n" + CLEAN.replace("def _clean", "def paged_attention"),
        "_use = lambda f: _impl\n@_use\n" + CLEAN.replace("def _clean", "def paged_attention"),
        "@(lambda f: _impl)\n" + CLEAN.replace("def _clean", "def paged_attention"),
        "paged_attention = _clean\npaged_attention.__code__ = _impl.__code__\n",
        "import functools\npaged_attention = _clean\nfunctools.update_wrapper(paged_attention, _impl)\n",
        "_pick = lambda f: _impl\npaged_attention = _pick(_clean)\n",
    ],
    ids=["one-of-a-dict", "one-of-two", "global-in-a-function", "globals", "sys-modules", "exec", "module-getattr",
         "for-target", "own-decorator", "decorator-bound-by-assignment", "decorator-expression", "code-swapped",
         "update-wrapper", "maker-bound-by-assignment"],
)
def test_a_binding_the_source_does_not_follow_is_for_a_reviewer(binding: str) -> None:
    """Which function runs is not in the source: the course's words are not searched for (the course's own
    attention.py holds its dense helpers beside paged_attention, so searching the whole file zeroed code the
    course accepts), and a reviewer is told."""
    found = kinds(f"{GROUPED}{IMPL}{CLEAN}{binding}")
    assert "entry_unresolved" in found and "sdpa_call" not in found


def test_an_objects_own_namespace_written_through_is_no_binding_of_paged_attention() -> None:
    # The conformant subject's pool restores its state with vars(self).update(...): it was flagged.
    source = (f"class Pool:\n    def rollback(self, state):\n        vars(self).clear()\n        vars(self).update(state)\n"
              f"        self.__dict__.update(state)\n{SIGNATURE}\n    return query\n")  # fmt: skip
    assert kinds(source) == []
    assert scan_source((Path(__file__).resolve().parent / "subjects" / "course_conformant.py").read_bytes(), "c.py") == []


def test_a_placeholder_and_other_functions_naming_sdpa_are_not_paged_attention() -> None:
    # The course's own attention.py holds its dense helpers beside paged_attention.
    source = ("import mlx.core as mx\npaged_attention = None\n"
              "def scaled_dot_product_attention_grouped(query, key, value):\n    return mx.fast.scaled_dot_product_attention(query, key, value, scale=1.0)\n"
              f"{SIGNATURE}\n    return query\n")  # fmt: skip
    assert kinds(source) == []


def test_a_name_another_file_imports_as_paged_attention_is_its_source(tmp_path: Path) -> None:
    package = tmp_path / "src" / "tiny_llm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from .attention import paged_attention\n")
    (package / "attention.py").write_text("from .kernels import attend as paged_attention\n")
    (package / "kernels.py").write_text(f"{GROUPED}{IMPL.replace('_impl', 'attend')}")
    found = [(f.file, f.kind) for f in scan_submission(tmp_path, tmp_path, tmp_path / "src")]
    assert ("src/tiny_llm/kernels.py", "sdpa_call") in found


@pytest.mark.parametrize(
    "source",
    [
        f"from .paged_kv_cache import gather_dense\n{SIGNATURE}\n    k, v = gather_dense(key_pages, value_pages, block_table, context_lens, page_size)\n",
        f"from .attention import scaled_dot_product_attention_grouped\n{SIGNATURE}\n    return scaled_dot_product_attention_grouped(query, key_pages, value_pages)\n",
    ],
    ids=["gather_dense", "dense-helper"],
)
def test_what_the_course_forbids_in_paged_attention_is_found(source: str) -> None:
    course = "sdpa_call" if "scaled_dot_product_attention" in source else "dense_gather"
    assert kinds(source) == sorted([course, "dense_route"])


@pytest.mark.parametrize(
    "source",
    [
        f"import mlx.core as mx\n{SIGNATURE}\n    k = mx.concatenate([key_pages[i] for i in range(3)], axis=1)\n",
        f"import mlx.core as mx\n{SIGNATURE}\n    k = mx.stack([value_pages[p] for p in block_table[0]])\n",
        f"from .reference import dense_attention\n{SIGNATURE}\n    return dense_attention(query, key_pages, value_pages)\n",
    ],
    ids=["concatenate-pages", "stack-pages", "dense_attention"],
)
def test_joins_of_pages_the_course_does_not_forbid_are_found_apart(source: str) -> None:
    assert kinds(source) == ["page_join"]


def test_fused_sdpa_elsewhere_is_allowed() -> None:
    source = f"""
    import mlx.core as mx
    def dense_layer(q, k, v):
        return mx.fast.scaled_dot_product_attention(q, k, v, scale=1.0)
    {SIGNATURE}
        heads = mx.concatenate([query, query], axis=1)
        return heads
    """
    assert kinds(source) == []


def test_unparsable_file_gives_no_findings() -> None:
    assert kinds(f"{SIGNATURE}\n    return (\n") == []


@pytest.mark.parametrize("nested", ["x = " + "+".join(["1"] * 200_000), "x = " + "-" * 200_000 + "1"],
                         ids=["binary-operators", "unary-operators"])
def test_a_file_nested_past_the_parser_is_flagged_unscanned_not_a_crash(nested: str) -> None:
    """The grader's parser gives up (RecursionError, or MemoryError for its own stack) on nesting a worker that
    raised its recursion limit may still compile: the scan says it could not read the file."""
    findings = scan_source(f"import mlx.core as mx\n{nested}\n", "deep.py")
    assert [(f.file, f.kind) for f in findings] == [("deep.py", "unscanned")]
    assert "nested too deep" in findings[0].detail


@pytest.mark.parametrize("words, kinds_found", [("", []), ("mx.fast.scaled_dot_product_attention", ["sdpa_call"])],
                         ids=["plain", "names-sdpa"])
def test_a_file_over_the_scan_limit_is_unscanned_and_read_as_text(words: str, kinds_found: list[str]) -> None:
    """A 6 MiB file took the grader's own process to 3.1 GB building its tree (staging allows 64 MiB); past the
    limit no tree is built, and the course's source check reads the whole text."""
    from pagecheck.grading.anticheat import SCAN_LIMIT_BYTES

    padding = "x = 1\n" * (SCAN_LIMIT_BYTES // 6 + 1)
    source = f"{SIGNATURE}\n    return {words or 'query'}\n{padding}"
    findings = scan_source(source, "big.py")
    assert [f.kind for f in findings] == ["unscanned", *kinds_found]
    assert "over the 1,048,576 whose syntax tree the grader builds" in findings[0].detail


def test_a_chain_of_attributes_past_the_recursion_limit_is_read() -> None:
    chain = "query" + ".T" * 2500
    assert kinds(f"import mlx.core as mx\n{SIGNATURE}\n    {chain}\n"
                 f"    return mx.fast.scaled_dot_product_attention(query, query, query, scale=1.0)\n") == ["sdpa_call",
                                                                                                     "sdpa_route"]


def test_bytes_are_decoded_by_the_files_coding_declaration() -> None:
    """A Latin-1 file decoded as UTF-8 has U+FFFD in its identifiers, a SyntaxError that would hide its calls."""
    source = (f"# -*- coding: latin-1 -*-\nimport mlx.core as mx\n{SIGNATURE}\n    caf\u00e9 = query\n"
              f"    return mx.fast.scaled_dot_product_attention(caf\u00e9, query, query, scale=1.0)\n")
    assert [f.kind for f in scan_source(source.encode("latin-1"), "attention.py")] == ["sdpa_call", "sdpa_route"]


def test_importing_the_grader_code_is_found_anywhere() -> None:
    source = "import numpy as np\nfrom pagecheck.reference.subject import paged_attention\nimport pagecheck.impl.kv_cache\n"
    assert [(f.kind, f.line) for f in scan_source(source, "attention.py")] == [("project_import", 2), ("project_import", 3)]
    # The layers' folder names are a student's own modules now: pagecheck installs one import name.
    assert scan_source("import reference\nfrom impl import x\n", "attention.py") == []


def test_own_package_of_the_same_name_is_not_the_grader_code() -> None:
    source = "from pagecheck.helpers import page_walk\nfrom .reference import oracle\n"
    assert scan_source(source, "attention.py", own_packages=frozenset({"pagecheck"})) == []


KERNEL_CALL = b"""#include "mlx/mlx.h"
namespace mx = mlx::core;
mx::array attend(const mx::array& q, const mx::array& k, const mx::array& v) {
  return mx::fast::
      scaled_dot_product_attention(q, k, v, 1.0f, "causal");
}
"""


def _checkout(tmp_path: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(data)
    (tmp_path / "src" / "tiny_llm").mkdir(parents=True, exist_ok=True)
    return tmp_path


def test_fused_sdpa_in_native_code_is_found(tmp_path: Path) -> None:
    """MLX's C++ SDPA, called from the extension, is out of reach of the worker's trap (a Python attribute of
    mlx.core.fast) and of the Python scan: its source, and the library the build made, are read instead."""
    symbol = b"\x7fELF\0\0_ZN3mlx4core4fast28scaled_dot_product_attentionERKNS0_5arrayES4_S4_f\0"
    root = _checkout(tmp_path, {"src/extensions/src/kernel.cpp": KERNEL_CALL,
                                "src/tiny_llm/libkernel.so": b"\0" * ((3 << 20) - 9) + symbol,
                                "src/tiny_llm/weights.bin": symbol})  # ctypes loads a library under any name  # fmt: skip
    found = [(f.file, f.line, f.kind) for f in scan_submission(root, root, root / "src")]
    assert found == [("src/extensions/src/kernel.cpp", 4, "sdpa_route"), ("src/tiny_llm/libkernel.so", 0, "sdpa_route"),
                     ("src/tiny_llm/weights.bin", 0, "sdpa_route")]


def test_native_code_of_its_own_is_not_a_finding(tmp_path: Path) -> None:
    own = b"""#include "mlx/mlx.h"
namespace tiny_llm_ext { mlx::core::array scaled_dot_product_attention(const mlx::core::array& q); }
mlx::core::array paged_attention(const mlx::core::array& q) { return tiny_llm_ext::scaled_dot_product_attention(q); }
"""
    root = _checkout(tmp_path, {"src/extensions/src/kernel.cpp": own,
                                "src/tiny_llm/libkernel.so": b"\x7fELF\0_ZN12tiny_llm_ext28scaled_dot_product_attention\0"})  # fmt: skip
    assert scan_submission(root, root, root / "src") == []


def test_a_copy_of_the_installed_mlx_is_not_a_finding_but_an_altered_one_is(tmp_path: Path) -> None:
    """MLX's own library defines the fused SDPA: a byte-for-byte copy of the installed one (a virtual environment
    inside a checkout, under a name staging keeps) is MLX, not the submission's code; a library that only shares
    its name is read like any other."""
    import importlib.util

    installed = [Path(location) for location in importlib.util.find_spec("mlx").submodule_search_locations]
    library = next(p for place in installed for p in sorted(place.rglob("*"))
                   if p.is_file() and b"3mlx4core4fast28" in p.read_bytes())  # fmt: skip
    root = _checkout(tmp_path, {"env/site-packages/mlx/lib/" + library.name: library.read_bytes(),
                                "src/tiny_llm/" + library.name: library.read_bytes() + b"\0"})  # fmt: skip
    found = [(f.file, f.kind) for f in scan_submission(root, root, root / "src")]
    assert found == [("src/tiny_llm/" + library.name, "sdpa_route")]
