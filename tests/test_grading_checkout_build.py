"""What grading needs to build a tiny-llm checkout's extension: the build tools, and only sources staged."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import sys
import tomllib
from pathlib import Path

from pagecheck.grading.sandboxed_command import SYSTEM_BIN_PATH, build_path
import pytest

from pagecheck.grading.submission import (
    DIGEST_SCHEME, MAX_FILE_BYTES, MAX_FOLDER_DEPTH, Submission, SubmissionFilesError, content_digest, find_kind,
    graded_files, stage_copy, submission_name,
)

ROOT = Path(__file__).resolve().parent.parent


def _pins(requirements: list[str], package: str) -> list[str]:
    return [text for text in requirements if text.split("[")[0].split("=")[0].split(">")[0].strip() == package]


def test_nanobind_is_a_runtime_dependency_pinned_as_the_build_pins_it() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    runtime, build = project["project"]["dependencies"], project["build-system"]["requires"]
    assert _pins(runtime, "nanobind") == _pins(build, "nanobind") == ["nanobind==3.1.0"]
    assert _pins(runtime, "mlx") == _pins(build, "mlx")  # the pair nanobind 3.1.0 goes with
    assert _pins(runtime, "cmake") and _pins(runtime, "setuptools")
    assert importlib.metadata.version("nanobind") == "3.1.0"


def test_the_build_finds_the_interpreters_own_build_tools() -> None:
    # The sandboxed build's PATH: this interpreter's scripts (pip's cmake), then the system's folders.
    scripts = str(Path(sys.executable).parent)
    assert build_path().split(os.pathsep) == [scripts, *SYSTEM_BIN_PATH.split(os.pathsep)]
    assert shutil.which("cmake", path=build_path()) is not None


def test_a_checkouts_compiled_extension_is_not_staged(tmp_path: Path) -> None:
    checkout = tmp_path / "tiny-llm"
    sources = {
        "src/tiny_llm/__init__.py": "",
        "src/extensions/build.py": "",
        "src/extensions/src/paged_attention.cpp": "",
        "src/extensions/tiny_llm_ext/__init__.py": "",
    }
    leftovers = (
        "src/extensions/tiny_llm_ext/_ext.cpython-311-x86_64-linux-gnu.so",
        "src/extensions/tiny_llm_ext/libtiny_llm_ext.so",
        "src/extensions/tiny_llm_ext/libtiny_llm_ext.dylib",
        "src/extensions/tiny_llm_ext/tiny_llm_ext.metallib",
    )
    for relative in [*sources, *leftovers]:
        path = checkout / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("a binary the student's own build left behind")
    submission = Submission(name=submission_name(checkout), path=checkout, kind=find_kind(checkout))
    root = stage_copy(submission, tmp_path / "staged")
    staged = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    assert staged == sorted(sources)
    # A run that builds nothing (sandbox:tiny-llm:PATH outside grading) imports the checkout as it is.
    root = stage_copy(submission, tmp_path / "as_it_is", keep_compiled=True)
    staged = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    assert staged == sorted([*sources, *leftovers])


def _nest(top: Path, depth: int) -> None:
    """`depth` folders named d, one inside the other, below `top`, made without long paths."""
    here = os.open(top, os.O_RDONLY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=here)
            inner = os.open("d", os.O_RDONLY, dir_fd=here)
            os.close(here)
            here = inner
    finally:
        os.close(here)


def _unnest(top: Path, depth: int) -> None:
    """Remove what _nest made, innermost first, without recursion (shutil.rmtree recurses per level)."""
    fds = [os.open(top, os.O_RDONLY)]
    for _ in range(depth - 1):
        fds.append(os.open("d", os.O_RDONLY, dir_fd=fds[-1]))
    while fds:
        fd = fds.pop()
        os.rmdir("d", dir_fd=fd)
        os.close(fd)


@pytest.mark.parametrize("depth", [MAX_FOLDER_DEPTH + 1, 1500], ids=["past the limit", "past the stack"])
def test_a_folder_nested_too_deep_stops_only_that_submission(tmp_path: Path, depth: int) -> None:
    # 1500 levels once made the listing recurse past Python's stack: a RecursionError that ended the run for
    # every submission. Now the submission is refused by name, with its own error.
    checkout = tmp_path / "tiny-llm"
    (checkout / "src" / "tiny_llm").mkdir(parents=True)
    (checkout / "src" / "tiny_llm" / "__init__.py").write_text("")
    _nest(checkout / "src", depth)
    try:
        submission = Submission(name="deep", path=checkout, kind=find_kind(checkout))
        for step in (graded_files, content_digest):
            with pytest.raises(SubmissionFilesError, match=f"folder 'src/d/d/.*' nests more than {MAX_FOLDER_DEPTH}"):
                step(submission)
    finally:
        _unnest(checkout / "src", depth)


def test_folders_that_are_never_staged_are_not_walked(tmp_path: Path) -> None:
    checkout = tmp_path / "tiny-llm"
    (checkout / "src" / "tiny_llm" / ".git").mkdir(parents=True)
    (checkout / "src" / "tiny_llm" / "__init__.py").write_text("")
    _nest(checkout / "src" / "tiny_llm" / ".git", 1500)
    try:
        submission = Submission(name="git", path=checkout, kind=find_kind(checkout))
        assert [relative for relative, _ in graded_files(submission)] == ["src/tiny_llm/__init__.py"]
    finally:
        _unnest(checkout / "src" / "tiny_llm" / ".git", 1500)


def test_an_unreadable_file_stops_only_that_submission(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pagecheck.grading.submission as submission_module

    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")

    def refuse(path: object, *args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(submission_module, "open", refuse, raising=False)  # the tests run as root: no chmod
    submission = Submission(name="pkg", path=package, kind=find_kind(package))
    with pytest.raises(SubmissionFilesError, match="file '__init__.py' cannot be read: Permission denied"):
        content_digest(submission)


@pytest.mark.parametrize("kind", ["package", "file"])
def test_a_file_too_large_to_grade_is_refused_unread(tmp_path: Path, kind: str) -> None:
    # Sparse: no disk, but reading it whole (as the digest once did) needed memory of its size.
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    big = package / "blob.bin" if kind == "package" else tmp_path / "big.py"
    with open(big, "wb") as file:
        file.truncate(MAX_FILE_BYTES + 1)
    path = package if kind == "package" else big
    submission = Submission(name="big", path=path, kind=find_kind(path))
    with pytest.raises(SubmissionFilesError, match=f"is {MAX_FILE_BYTES + 1} bytes, over the {MAX_FILE_BYTES}"):
        content_digest(submission)


def test_a_path_that_is_no_submission_is_graded_load_failed_not_refused(tmp_path: Path) -> None:
    """An empty folder or a stray file among a class's submissions is listed with the reason (its files cannot
    be staged), and the run goes on; only a path that does not exist stops the run (a typo)."""
    from pagecheck.grading.submission import load_submissions

    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "amy.py").write_text("x = 1\n")
    found = load_submissions([str(tmp_path / name) for name in ("empty", "notes.txt", "amy.py")])
    assert [(s.name, s.kind) for s in found] == [("amy", "file"), ("empty", "unrecognized"), ("notes", "unrecognized")]
    for submission, kind in zip(found[1:], ("folder 'empty'", "file 'notes.txt'")):
        with pytest.raises(SubmissionFilesError, match=f"the {kind} is not a tiny-llm checkout"):
            content_digest(submission)
    with pytest.raises(ValueError, match="does not exist"):
        load_submissions([str(tmp_path / "missing")])


def test_the_digest_streams_files_to_the_same_value(tmp_path: Path) -> None:
    import hashlib

    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_bytes(b"x" * 3_000_000)  # several read chunks
    (package / "a.py").write_bytes(b"VALUE = 1\n")
    whole = hashlib.sha256(DIGEST_SCHEME)
    for name in ("__init__.py", "a.py"):
        contents = hashlib.sha256((package / name).read_bytes()).digest()
        whole.update(len(name).to_bytes(8, "big") + name.encode() + contents)
    assert content_digest(Submission(name="pkg", path=package, kind=find_kind(package))) == whole.hexdigest()


def test_links_are_neither_graded_nor_staged_nor_digested(tmp_path: Path) -> None:
    """A submission's links to a file or folder outside it (a secret of the grader's, a big tree) are left out
    of the listing, the staged copy and the digest: the trusted grader never reads through them."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("the grader's secret")
    checkout = tmp_path / "tiny-llm"
    package = checkout / "src" / "tiny_llm"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    submission = Submission(name="links", path=checkout, kind=find_kind(checkout))
    digest = content_digest(submission)
    (package / "secret.txt").symlink_to(outside / "secret.txt")
    (package / "outside").symlink_to(outside, target_is_directory=True)
    assert [relative for relative, _ in graded_files(submission)] == ["src/tiny_llm/__init__.py"]
    root = stage_copy(submission, tmp_path / "staged")
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) == ["src", "src/tiny_llm",
                                                                                 "src/tiny_llm/__init__.py"]
    assert content_digest(submission) == digest


def test_a_checkout_whose_src_is_a_link_is_refused(tmp_path: Path) -> None:
    """A checkout's src/ may not stand for another folder (another student's checkout, say): nothing is staged."""
    other = tmp_path / "other" / "src"
    (other / "tiny_llm").mkdir(parents=True)
    (other / "tiny_llm" / "__init__.py").write_text("")
    checkout = tmp_path / "tiny-llm"
    checkout.mkdir()
    (checkout / "src").symlink_to(other, target_is_directory=True)
    submission = Submission(name="linked", path=checkout, kind=find_kind(checkout))
    for step in (graded_files, content_digest):
        with pytest.raises(SubmissionFilesError, match="folder 'src' is a link"):
            step(submission)


def test_no_two_listings_share_a_digest_by_moving_bytes_between_files(tmp_path: Path) -> None:
    """With bare separators between paths and contents, the bytes of a file could end with a separator and the
    next file's path: a package of a data file and the correct __init__.py then hashed as another of the same
    data file emptied, the broken __init__.py and a file holding the correct one, and the broken one reused
    the correct one's result on a rerun."""
    honest, broken = b"honest = 1\n", b"broken = 1\n"
    one, two = tmp_path / "one" / "sub", tmp_path / "two" / "sub"
    for folder, files in ((one, {"A.dat": b"\0__init__.py\0" + broken + b"\0__init__.q\0", "__init__.py": honest}),
                          (two, {"A.dat": b"", "__init__.py": broken, "__init__.q": b"\0__init__.py\0" + honest})):
        folder.mkdir(parents=True)
        for name, data in files.items():
            (folder / name).write_bytes(data)
    digests = {content_digest(Submission(name="sub", path=path, kind=find_kind(path))) for path in (one, two)}
    assert len(digests) == 2


@pytest.mark.parametrize("file_name, start", [("-bob.py", "bob-"), ("--x-.py", "x-"), ("_a.b-.py", "a.b-"),
                                              ("alice.py", "alice"), ("иванов.py", "submission-"), ("josé.py", "jos-")])
def test_a_submission_name_is_safe_and_keeps_unsafe_names_apart(tmp_path: Path, file_name: str, start: str) -> None:
    """`-bob.py` was graded as "-bob", whose result broke grade.schema.json: no scoreboard for the whole class;
    `иванов.py` had an empty name and `josé.py` and `josè.py` the same one, each refusing the whole class's grade.
    A name that is not safe as it is gets a hash of the whole."""
    from pagecheck.grading.submission import submission_name
    from pagecheck.reports.schema_check import schema_errors
    from tests.grading_results import result_document

    path = tmp_path / file_name
    path.write_text("x = 1\n")
    name = submission_name(path)
    assert name.startswith(start) and (name == start) == (file_name == f"{start}.py")
    assert schema_errors("grade", result_document(name, {"context_len": ["pass"]})) == []


def test_names_that_differ_only_where_they_were_unsafe_stay_apart(tmp_path: Path) -> None:
    from pagecheck.grading.submission import load_submissions

    paths = [tmp_path / name for name in ("josé.py", "josè.py", "иванов.py", "日本.py")]
    for path in paths:
        path.write_text("x = 1\n")
    # The same file named twice (a glob and a path, say) is graded once.
    submissions = load_submissions([str(p) for p in [*paths, paths[0]]])
    assert len({s.name for s in submissions}) == len(submissions) == 4
