"""Files and folders a user names on the command line: reading one (a rubric, a secret, an earlier bench.json, a shard's result), and resolving its path.

A path there may name anything: a regular file, a folder, a pipe (`--seed-file <(pass show secret)`), a named
FIFO no one writes to, or a device such as /dev/zero. Opening a FIFO for reading waits for a writer, and
reading /dev/zero never ends, so `read_input_bytes` opens without waiting, refuses what is neither a regular
file nor a pipe, stops at `limit` bytes, and gives a pipe `wait_s` seconds to reach its end. Every refusal is
an OSError whose `strerror` says why in words, so a caller's "cannot be read: {strerror}" reads well.
"""

from __future__ import annotations

import errno
import os
import select
import stat
import time
from pathlib import Path

MIB = 1 << 20
PIPE_WAIT_S = 10.0  # how long a pipe may take to deliver its whole text


def _kind(mode: int) -> str:
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _too_big(path: Path, limit: int) -> OSError:
    return OSError(errno.EFBIG, f"it holds more than {limit:,} bytes, the most read from such a file", str(path))


def read_input_bytes(path: Path, limit: int, wait_s: float | None = None) -> bytes:
    """The bytes of the regular file or pipe at `path`, at most `limit` of them; OSError names what is wrong.
    A pipe has `wait_s` seconds (default PIPE_WAIT_S) to reach its end."""
    wait_s = PIPE_WAIT_S if wait_s is None else wait_s
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    descriptor = os.open(path, flags)  # a FIFO opens at once, writer or not
    try:
        mode = os.fstat(descriptor).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "it is a folder, not a file", str(path))
        pipe = stat.S_ISFIFO(mode)
        if not (pipe or stat.S_ISREG(mode)):
            raise OSError(errno.EINVAL, f"it is {_kind(mode)}, not a regular file or a pipe", str(path))
        if not pipe and os.fstat(descriptor).st_size > limit:
            raise _too_big(path, limit)
        chunks: list[bytes] = []
        total = 0
        deadline = time.monotonic() + wait_s
        while True:
            if pipe:
                left = deadline - time.monotonic()
                ready = select.select([descriptor], [], [], max(left, 0.0))[0] if left > 0 else []
                if not ready:
                    raise TimeoutError(errno.ETIMEDOUT, f"the pipe did not reach its end within {wait_s:g} s "
                                       "(nothing writes to it, or the writer never closes it)", str(path))  # fmt: skip
            try:
                chunk = os.read(descriptor, min(limit + 1 - total, MIB))
            except BlockingIOError:
                continue
            if not chunk:
                return b"".join(chunks)
            total += len(chunk)
            if total > limit:
                raise _too_big(path, limit)
            chunks.append(chunk)
    finally:
        os.close(descriptor)


def read_input_text(path: Path, limit: int, wait_s: float | None = None) -> str:
    """`read_input_bytes` as UTF-8 text; bytes that are not UTF-8 raise UnicodeDecodeError (a ValueError)."""
    return read_input_bytes(path, limit, wait_s).decode("utf-8")


LINK_LOOP = "is a symbolic link that leads back to itself"  # after the name it follows


def resolve_path(path: Path) -> Path:
    """`path` made absolute with every link followed; OSError(ELOOP) naming it for a loop of links (Python 3.11
    and 3.12 raise RuntimeError there, 3.13 returns the looping path, which os.stat then refuses)."""
    try:
        resolved = Path(path).expanduser().resolve()
    except RuntimeError:
        raise OSError(errno.ELOOP, LINK_LOOP, str(path)) from None
    try:
        os.stat(resolved)
    except OSError as exc:  # a path that does not exist yet is fine
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, LINK_LOOP, str(path)) from None
    return resolved

