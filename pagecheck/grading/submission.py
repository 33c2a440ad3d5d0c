"""What a submission is: where it lives, what kind it is, and the name it is graded under.

Three kinds are accepted:

    tiny-llm   a checkout with src/tiny_llm/__init__.py; only src/ is staged and graded
    file       one .py file exposing the subject API at top level
    package    a directory with __init__.py exposing the subject API at top level

The name (the file's stem or the directory's name, with anything outside
[A-Za-z0-9._-] replaced) names every output file, so two submissions with the
same name are refused rather than overwriting each other.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from pagecheck.input_files import resolve_path

# "unrecognized": a path that exists but is none of the others (an empty folder in a class's folder of
# submissions); it is graded load-failed with the reason, so the scoreboard lists it and the run goes on.
KINDS = ("tiny-llm", "file", "package", "unrecognized")
NOT_A_SUBMISSION = "not a tiny-llm checkout (src/tiny_llm/__init__.py), a .py file or a package"
# Never staged: VCS data, caches and build trees a checkout may carry.
SKIPPED_NAMES = frozenset({".git", "__pycache__", ".venv", "venv", "build", ".pytest_cache", ".hypothesis"})
# Never staged from a tiny-llm checkout: compiled extension files. The grader builds the extension from its
# sources, so the module the suite imports is the one built here, never a binary the checkout carried (a
# leftover of the student's own build would otherwise be imported whenever the grader's build fails).
COMPILED_SUFFIXES = frozenset({".so", ".dylib", ".pyd", ".metallib", ".o", ".a"})
# How deep a graded folder may nest below the graded root (a checkout's src/tiny_llm/... is 2 or 3 levels). The
# walk keeps its own stack, so no nesting can exhaust Python's, but a tree thousands of levels deep has paths
# longer than the system allows: such a submission is refused, never half staged.
MAX_FOLDER_DEPTH = 32
# What one submission may stage: the grader reads every graded file to digest it and copies it into the
# sandbox, so a huge (or sparse) file or a flood of files is refused up front, by name, not read.
MAX_FILE_BYTES = 64 * 2**20
MAX_STAGED_BYTES = 512 * 2**20
MAX_FILES = 50_000
SHOWN_PATH_CHARS = 120
DIGEST_CHUNK_BYTES = 2**20
UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]")
MAX_NAME_CHARS = 100
NAME_HASH_CHARS = 12


class SubmissionFilesError(ValueError):
    """A submission's graded files cannot be listed, read or copied; the message says where and why. It stops
    that submission's grading (no check runs), never the run."""


@dataclass(frozen=True)
class Submission:
    name: str
    path: Path  # as given, resolved
    kind: str

    def staged_root(self, staged: Path) -> Path:
        """Where the subject lives inside a staged copy made by stage_copy."""
        return staged / self.path.name

    def student_dir(self, staged: Path) -> Path:
        """The staged directory that stands for where the student runs commands from (see student_spec)."""
        return self.staged_root(staged) if self.kind == "tiny-llm" else staged

    def import_root(self, staged: Path) -> Path:
        """The directory whose top-level modules the subject's imports resolve to first."""
        return self.staged_root(staged) / "src" if self.kind == "tiny-llm" else staged

    def spec_in(self, folder: str) -> str:
        """The subject spec of a staged copy (stage_copy) seen at `folder`."""
        return self._spec_at(f"{folder}/{self.path.name}")

    def student_spec(self) -> str:
        """The --pagecheck-subject spec of the submission as given, valid from any directory."""
        return self._spec_at(str(self.path))

    def _spec_at(self, path: str) -> str:
        """The spec of this kind of submission at `path`: every kind is a path, a package by its __init__.py, so
        that its name never means a built-in subject (a package named impl)."""
        if self.kind == "tiny-llm":
            return f"tiny-llm:{path}"
        return path + ("/__init__.py" if self.kind == "package" else "")


def submission_name(path: Path) -> str:
    """The file's stem or the folder's name where it is safe as it is (ASCII letters, digits, ".", "_", "-",
    starting and ending with a letter or digit, as grade.schema.json has a result's name). Any other is made safe
    and given a hash of the whole (`иванов` -> `submission-<hash>`, `josé` -> `jos-<hash>`), so two names that
    differ only where they were unsafe stay apart; a long one is cut to MAX_NAME_CHARS, so every output file name
    stays far below the system's limit."""
    stem = path.stem if path.is_file() else path.name
    name = UNSAFE_NAME_CHARS.sub("_", stem).strip("._-")
    if name == stem and len(name) <= MAX_NAME_CHARS:
        return name
    digest = hashlib.sha256(os.fsencode(stem)).hexdigest()[:NAME_HASH_CHARS]
    return f"{(name or 'submission')[: MAX_NAME_CHARS - NAME_HASH_CHARS - 1].rstrip('._-')}-{digest}"


def find_kind(path: Path) -> str:
    if path.is_dir() and (path / "src" / "tiny_llm" / "__init__.py").is_file():
        return "tiny-llm"
    if path.is_file() and path.suffix == ".py":
        return "file"
    if path.is_dir() and (path / "__init__.py").is_file():
        return "package"
    return "unrecognized"


def load_submissions(paths: list[str]) -> list[Submission]:
    """Submissions for the given paths, sorted by name; duplicate names are a ValueError."""
    found: dict[str, Submission] = {}
    for text in paths:
        try:
            path = resolve_path(Path(text))
        except OSError as exc:
            raise ValueError(f"submission={text!r} {exc.strerror}") from None
        if not path.exists():
            raise ValueError(f"submission={text!r} does not exist")
        submission = Submission(name=submission_name(path), path=path, kind=find_kind(path))
        if submission.name in found and found[submission.name].path == path:
            continue  # the same submission named twice (a shell glob and a path, say): graded once
        if submission.name in found:
            raise ValueError(
                f"submission={text!r} has the name {submission.name!r}, already taken by "
                f"{str(found[submission.name].path)!r}"
            )
        found[submission.name] = submission
    return [found[name] for name in sorted(found)]


def graded_files(submission: Submission, keep_compiled: bool = False) -> list[tuple[str, Path]]:
    """(path relative to the staged root, source file) for every file that is staged and graded, sorted.
    Links are never followed or listed. A tiny-llm checkout's compiled files (COMPILED_SUFFIXES) are left out
    unless `keep_compiled` (a run that builds nothing and imports the checkout as it is).
    SubmissionFilesError for a folder that cannot be listed or nests deeper than MAX_FOLDER_DEPTH."""
    if submission.kind == "file":
        _checked_size(repr(submission.path.name), submission.path.stat)
        return [(submission.path.name, submission.path)]
    if submission.kind == "unrecognized":
        kind = "folder" if submission.path.is_dir() else "file"
        raise SubmissionFilesError(f"the {kind} {submission.path.name!r} is {NOT_A_SUBMISSION}")
    top = submission.path / "src" if submission.kind == "tiny-llm" else submission.path
    prefix = "src/" if submission.kind == "tiny-llm" else ""
    if top.is_symlink():  # its files would be another folder's, wherever the link points
        raise SubmissionFilesError(f"folder {prefix.rstrip('/')!r} is a link; the graded files must be the checkout's own")
    found = []
    total = 0
    folders = [(top, 0)]  # a stack of (folder, depth below top): no recursion
    while folders:
        folder, depth = folders.pop()
        try:
            with os.scandir(folder) as entries:
                listed = [(entry.name, entry.is_symlink(), entry.is_dir(follow_symlinks=False),
                           entry.is_file(follow_symlinks=False), entry) for entry in entries]
        except OSError as exc:
            raise SubmissionFilesError(f"folder {_shown_path(prefix, folder, top)} cannot be listed: "
                                       f"{exc.strerror or exc}") from None
        for name, is_symlink, is_dir, is_file, entry in listed:
            if name in SKIPPED_NAMES or name.endswith(".egg-info") or is_symlink:
                continue
            path = folder / name
            if is_dir:
                if depth + 1 > MAX_FOLDER_DEPTH:
                    raise SubmissionFilesError(f"folder {_shown_path(prefix, path, top)} nests more than "
                                               f"{MAX_FOLDER_DEPTH} folders deep")
                folders.append((path, depth + 1))
            elif is_file and path.suffix != ".pyc":
                if submission.kind == "tiny-llm" and not keep_compiled and path.suffix in COMPILED_SUFFIXES:
                    continue
                total += _checked_size(_shown_path(prefix, path, top), partial(entry.stat, follow_symlinks=False))
                found.append((prefix + path.relative_to(top).as_posix(), path))
                if len(found) > MAX_FILES or total > MAX_STAGED_BYTES:
                    raise SubmissionFilesError(f"over {MAX_FILES} files or {MAX_STAGED_BYTES} bytes to stage "
                                               f"(at {_shown_path(prefix, path, top)})")
    return sorted(found)


def _checked_size(shown: str, stat: Callable[[], os.stat_result]) -> int:
    """The size `stat` gives the file named `shown`, or SubmissionFilesError when it cannot be read or is over
    MAX_FILE_BYTES."""
    try:
        size = stat().st_size
    except OSError as exc:
        raise SubmissionFilesError(f"file {shown} cannot be read: {exc.strerror or exc}") from None
    if size > MAX_FILE_BYTES:
        raise SubmissionFilesError(f"file {shown} is {size} bytes, over the {MAX_FILE_BYTES} a graded file may have")
    return size


def _shown_path(prefix: str, path: Path, top: Path) -> str:
    """`path` relative to the submission, cut to SHOWN_PATH_CHARS for a message."""
    shown = prefix + path.relative_to(top).as_posix() if path != top else prefix.rstrip("/") or "."
    return repr(shown if len(shown) <= SHOWN_PATH_CHARS else shown[:SHOWN_PATH_CHARS] + "...")


def _digest_file(digest: Any, relative: str, path: Path) -> None:
    """Feed the file's bytes to `digest` a chunk at a time (the listing has capped its size)."""
    try:
        with open(path, "rb") as file:
            while chunk := file.read(DIGEST_CHUNK_BYTES):
                digest.update(chunk)
    except OSError as exc:
        raise SubmissionFilesError(f"file {relative!r} cannot be read: {exc.strerror or exc}") from None


def stage_copy(submission: Submission, staged: Path, keep_compiled: bool = False) -> Path:
    """Copy what is graded (graded_files) into `staged` (which must not exist) and return the subject's root
    there."""
    staged.mkdir(parents=True)
    root = submission.staged_root(staged)
    if submission.kind == "file":
        shutil.copy2(submission.path, root)
        return root
    for relative, source in graded_files(submission, keep_compiled):
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copy2(source, target, follow_symlinks=False)  # listed as a file: never a link's target
        except OSError as exc:
            raise SubmissionFilesError(f"file {relative!r} cannot be copied: {exc.strerror or exc}") from None
    return root


def unstaged_digest(error: SubmissionFilesError) -> str:
    """The digest recorded for a submission whose files cannot be staged: sha256 over a marker and the reason
    (the marker keeps it apart from any digest of files), so a rerun reuses the result until the reason
    changes."""
    return hashlib.sha256(b"unstaged\0" + str(error).encode("utf-8", "replace")).hexdigest()


# Starts every content_digest: a digest of another scheme (an earlier pagecheck's) never equals one of this.
DIGEST_SCHEME = b"pagecheck submission digest 2\0"


def content_digest(submission: Submission) -> str:
    """sha256 over every graded file's relative path and contents: a changed submission is graded again.

    Each file adds its path's length (8 bytes), the path, and the sha256 of its contents, so that no two
    listings give the same stream: with bare separators, a file whose bytes held a separator and a path could
    stand for the next file, and a broken submission could share a correct one's digest, and its result."""
    digest = hashlib.sha256(DIGEST_SCHEME)
    for relative, path in graded_files(submission):
        name = os.fsencode(relative)  # names need not be UTF-8
        contents = hashlib.sha256()
        _digest_file(contents, relative, path)
        digest.update(len(name).to_bytes(8, "big") + name + contents.digest())
    return digest.hexdigest()
