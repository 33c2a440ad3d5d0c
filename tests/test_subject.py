"""Subject loading: every kind of spec, the names a subject lacks, and clear errors for bad specs."""

from __future__ import annotations

import sys
from collections.abc import Iterator
import re
from pathlib import Path

import pytest

from pagecheck.invariants.subject import API_NAMES, SubjectError, load_subject

TINY_LLM_FILES = {
    "__init__.py": "",
    "attention.py": "def paged_attention(*args, **kwargs):\n    return 'tiny'\n",
    "paged_kv_cache.py": "class TinyKvPagedPool:\n    pass\n\n\nclass TinyKvPagedCache:\n    pass\n",
    "kv_cache.py": "class TinyKvFullCache:\n    pass\n",
}


@pytest.fixture
def tiny_llm_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    package = tmp_path / "tiny-llm" / "src" / "tiny_llm"
    package.mkdir(parents=True)
    for name, text in TINY_LLM_FILES.items():
        (package / name).write_text(text)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield tmp_path / "tiny-llm"
    for name in [m for m in sys.modules if m == "tiny_llm" or m.startswith("tiny_llm.")]:
        del sys.modules[name]


def test_reference_has_the_whole_api() -> None:
    subject = load_subject("reference")
    assert all(subject.has(name) for name in API_NAMES)
    assert not subject.missing


def test_module_and_file_specs_name_the_same_objects() -> None:
    by_module = load_subject("pagecheck.reference.subject")
    by_file = load_subject(str(Path(__file__).resolve().parent.parent / "reference" / "subject.py"))
    assert set(by_module.names) == set(by_file.names) == set(API_NAMES)
    assert by_file.get("paged_attention").__name__ == "paged_attention"


def test_missing_names_carry_a_reason(tmp_path: Path) -> None:
    partial = tmp_path / "partial.py"
    partial.write_text("from reference.subject import paged_attention\n")
    subject = load_subject(str(partial))
    assert subject.has("paged_attention") and not subject.has("TinyKvPagedPool")
    assert "not defined in" in subject.missing["BatchingKvCache"]
    with pytest.raises(AttributeError, match="has no TinyKvPagedCache"):
        subject.get("TinyKvPagedCache")


def test_impl_has_the_whole_api() -> None:
    subject = load_subject("impl")
    assert not subject.missing, subject.describe()


def test_tiny_llm_checkout_is_imported_from_src(tiny_llm_checkout: Path) -> None:
    subject = load_subject(f"tiny-llm:{tiny_llm_checkout}")
    assert subject.get("paged_attention")() == "tiny"
    assert subject.has("TinyKvPagedPool") and subject.has("TinyKvPagedCache")
    assert subject.missing == {"BatchingKvCache": "tiny_llm.kv_cache defines no BatchingKvCache"}


def test_a_missing_module_is_the_reason_a_name_is_missing(tiny_llm_checkout: Path) -> None:
    (tiny_llm_checkout / "src" / "tiny_llm" / "kv_cache.py").unlink()
    subject = load_subject(f"tiny-llm:{tiny_llm_checkout}")
    assert subject.missing == {"BatchingKvCache": "no module tiny_llm.kv_cache"}


@pytest.mark.parametrize(
    "spec, words",
    [
        ("", "empty"),
        ("no_such_module_here", "no module named"),
        ("nowhere/subject.py", "is not an existing .py file"),
        ("tiny-llm:/nonexistent/checkout", "does not exist or is not a folder"),
        ("tiny-llm:/", "is not a tiny_llm package"),
        ("not a spec!", "is not one of"),
    ],
)
def test_bad_specs_raise_subject_error(spec: str, words: str) -> None:
    with pytest.raises(SubjectError, match=words):
        load_subject(spec)


@pytest.mark.parametrize("prefix", ["", "tiny-llm:"], ids=["path", "tiny-llm"])
def test_a_loop_of_links_is_a_subject_error(tmp_path: Path, prefix: str) -> None:
    """`ln -s loop loop`: resolve's RuntimeError was an internal error of every command, and pytest's."""
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(SubjectError, match=re.escape(f"{loop} is a symbolic link that leads back to itself")):
        load_subject(f"{prefix}{loop}")


def test_a_module_getattr_that_raises_leaves_the_name_missing_with_why(tmp_path: Path) -> None:
    """A module `__getattr__` raising RuntimeError escaped hasattr(): an internal error of every command."""
    subject = tmp_path / "lazy.py"
    subject.write_text("def paged_attention(*args):\n    return 'here'\n\n\n"
                       "def __getattr__(name):\n    raise RuntimeError(f'lazy {name} failed')\n")
    loaded = load_subject(str(subject))
    assert loaded.get("paged_attention")() == "here"
    assert "raised RuntimeError('lazy TinyKvPagedPool failed')" in loaded.missing["TinyKvPagedPool"]


def test_a_package_folder_is_the_package(tmp_path: Path) -> None:
    """A folder with __init__.py names its package, as `grade` takes it (it was "not an existing .py file")."""
    package = tmp_path / "student_attention"
    package.mkdir()
    (package / "ops.py").write_text("def paged_attention(*args):\n    return 'from the package'\n")
    (package / "__init__.py").write_text("from .ops import paged_attention\n")
    subject = load_subject(str(package))
    assert subject.get("paged_attention")() == "from the package"
    assert subject.origin == str(package / "__init__.py")


@pytest.mark.parametrize("checkout", [False, True], ids=["plain-folder", "tiny-llm-checkout"])
def test_a_folder_that_is_not_a_package_says_what_to_name(tmp_path: Path, checkout: bool) -> None:
    folder = tmp_path / "work"
    (folder / "src" / "tiny_llm").mkdir(parents=True)
    if checkout:
        (folder / "src" / "tiny_llm" / "__init__.py").write_text("")
    hint = f"name tiny-llm:{folder} for a tiny-llm checkout" if checkout else "name a .py file in it"
    with pytest.raises(SubjectError, match=re.escape(f"{folder} is a folder without __init__.py, so not a package: "
                                                     f"{hint}")):  # fmt: skip
        load_subject(str(folder))


def test_a_file_that_fails_to_import_is_an_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('kernel library missing')\n")
    with pytest.raises(SubjectError, match="kernel library missing"):
        load_subject(str(broken))


@pytest.mark.parametrize(
    "source, words",
    [("import sys\nsys.exit(0)\n", "SystemExit"), ("class Stop(BaseException):\n    pass\nraise Stop('x')\n", "Stop")],
    ids=["sys-exit", "base-exception"],
)
def test_a_file_that_exits_on_import_is_an_error_not_the_end_of_pagecheck(
    tmp_path: Path, source: str, words: str
) -> None:
    # sys.exit(0) at import once ended `pagecheck tolerance` with status 0 and no report: a false success.
    subject = tmp_path / "exits.py"
    subject.write_text(source)
    with pytest.raises(SubjectError, match=words):
        load_subject(str(subject))


def test_a_keyboard_interrupt_at_import_is_the_subjects_error_under_the_commands_handler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A subject raising KeyboardInterrupt at import read as the user's Ctrl-C (exit 130, "interrupted"); under
    pagecheck's handler it is a subject that does not load. Without that handler it still stops the run."""
    import signal

    from pagecheck.cli import _Interrupt

    subject = tmp_path / "interrupts.py"
    subject.write_text("raise KeyboardInterrupt\n")
    monkeypatch.setattr(signal, "getsignal", lambda signum: signal.default_int_handler)
    with pytest.raises(KeyboardInterrupt):
        load_subject(str(subject))
    monkeypatch.setattr(signal, "getsignal", lambda signum: _Interrupt())
    with pytest.raises(SubjectError, match="KeyboardInterrupt"):
        load_subject(str(subject))


def test_an_api_name_that_is_not_callable_is_an_error_naming_it(tmp_path: Path) -> None:
    subject = tmp_path / "wrong_types.py"
    subject.write_text("paged_attention = 3\n")
    with pytest.raises(SubjectError, match="paged_attention=3 is int, not a function"):
        load_subject(str(subject))


@pytest.mark.parametrize(
    "damage",
    ["import sys\nsys.stdout.close()\n", "import sys\nsys.modules['mlx.core'] = None\n"],
    ids=["closes-stdout", "removes-mlx-core"],
)
def test_what_a_subjects_import_takes_from_pagechecks_process_is_put_back(tmp_path: Path, damage: str) -> None:
    """Both ended `pagecheck tolerance` in an internal error ("a bug in pagecheck") once the sweep was done."""
    import subprocess
    import sys

    subject = tmp_path / "damaging.py"
    subject.write_text("from pagecheck.impl import paged_attention  # noqa: F401\n" + damage)
    done = subprocess.run([sys.executable, "-m", "pagecheck.cli", "tolerance", "--quick", "--subject", str(subject),
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0 and "internal error" not in done.stderr, done.stderr[-2000:]
    assert (tmp_path / "out" / "tolerance.md").is_file()
