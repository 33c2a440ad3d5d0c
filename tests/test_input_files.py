"""A file a user names is read whole or refused in words: never a wait on a silent FIFO, never /dev/zero's
endless bytes, never past a size limit."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from pagecheck.input_files import read_input_bytes, read_input_text


def test_a_regular_file_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "secret.txt"
    path.write_text("drawn from here\n")
    assert read_input_text(path, 100) == "drawn from here\n"


def test_a_file_over_the_limit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.toml"
    path.write_bytes(b"x" * 101)
    assert read_input_bytes(path, 101) == b"x" * 101
    with pytest.raises(OSError, match="it holds more than 100 bytes"):
        read_input_bytes(path, 100)


@pytest.mark.parametrize("device, kind", [("/dev/zero", "a character device"), ("/dev/null", "a character device")])
def test_a_device_is_refused_without_reading(device: str, kind: str) -> None:
    if not os.path.exists(device):
        pytest.skip(f"{device} is not on this system")
    started = time.monotonic()
    with pytest.raises(OSError) as refused:
        read_input_bytes(Path(device), 1 << 20)
    assert refused.value.strerror == f"it is {kind}, not a regular file or a pipe"
    assert time.monotonic() - started < 5


def test_a_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError, match="it is a folder, not a file"):
        read_input_bytes(tmp_path, 100)


def test_a_fifo_no_one_writes_to_is_refused_after_the_wait(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="the pipe did not reach its end within 0.3 s"):
        read_input_bytes(fifo, 100, wait_s=0.3)
    assert 0.25 < time.monotonic() - started < 5


def test_a_fifo_a_writer_fills_and_closes_is_read(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    def write() -> None:
        time.sleep(0.2)
        with open(fifo, "w") as writer:
            writer.write("first ")
            writer.flush()
            time.sleep(0.1)
            writer.write("second\n")

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert read_input_text(fifo, 100, wait_s=10) == "first second\n"
    finally:
        writer.join()


def test_an_endless_pipe_stops_at_the_limit() -> None:
    """`--seed-file <(yes)`: the pipe never ends, and the read stops one byte past the limit."""
    read_end, write_end = os.pipe()
    stop = threading.Event()

    def write() -> None:
        try:
            while not stop.is_set():
                os.write(write_end, b"y\n" * 4096)
        except OSError:  # the reader closed its end
            pass
        finally:
            os.close(write_end)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        with pytest.raises(OSError, match="it holds more than 65,536 bytes"):
            read_input_bytes(Path(f"/proc/self/fd/{read_end}"), 65_536, wait_s=10)
    finally:
        stop.set()
        os.close(read_end)
        writer.join()


def test_text_that_is_not_utf8_is_a_value_error(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(b"name = '\xe9'\n")
    with pytest.raises(UnicodeDecodeError):
        read_input_text(path, 100)


def test_resolve_path_names_a_loop_of_links_and_takes_a_path_not_made_yet(tmp_path: Path) -> None:
    """On Python 3.11 and 3.12 resolve() raises RuntimeError for a loop, on 3.13 it returns the loop's own path:
    either way the answer is OSError(ELOOP) naming it."""
    import errno

    from pagecheck.input_files import resolve_path

    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(OSError) as refused:
        resolve_path(loop)
    assert refused.value.errno == errno.ELOOP and "leads back to itself" in refused.value.strerror
    assert resolve_path(tmp_path / "not" / "made") == (tmp_path / "not" / "made").resolve()
