"""argparse types that several programs share; each error names the option and the bad text.

Kept free of heavy imports: `python -m pagecheck.bench.attention` child processes parse their options with it.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import Callable


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def positive_int(text: str) -> int:
    """A type for one integer of at least 1 (e.g. --calls 60); argparse names the option in its error."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be positive")
    return value


def int_in(least: int, most: int) -> Callable[[str], int]:
    """A type for one integer in least..most (e.g. --batch, at most serving's decode slots)."""

    def parse(text: str) -> int:
        value = _integer(text)
        if not least <= value <= most:
            raise argparse.ArgumentTypeError(f"{value} must be in {least}..{most}")
        return value

    return parse


def non_negative_int(text: str) -> int:
    """A type for one integer of at least 0 (e.g. --jobs 0, which means no worker processes)."""
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must be 0 or more")
    return value


def positive_number(text: str) -> float:
    """A type for a finite number above 0 (e.g. --timeout 300, --memory 0.5); inf and nan are refused here,
    the range of each quantity where it is used."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text.strip()} must be a finite number above 0")
    return value


def number_up_to(most: float, least: float = 0.0) -> Callable[[str], float]:
    """A type for a finite number above 0 (and at least `least`) and at most `most` (e.g. --check-timeout)."""

    def parse(text: str) -> float:
        value = positive_number(text)
        if value > most:
            raise argparse.ArgumentTypeError(f"{text.strip()} is above the most allowed, {most:g}")
        if value < least:
            raise argparse.ArgumentTypeError(f"{text.strip()} is below the least allowed, {least:g}")
        return value

    return parse


NAME_MAX = 255  # bytes in one file or folder name (Linux, macOS)
PATH_ROOM = 4096 - NAME_MAX - 1  # PATH_MAX, less room for a file name written under the folder given


def path_arg(text: str) -> Path:
    """A type for a path option (an output folder or file): an empty string (which would mean the current
    folder) is refused, and so is a path the system cannot name (a NUL byte, a name over NAME_MAX bytes, a path
    that leaves no room under PATH_MAX for the files written there), which would fail the run at its first
    file."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path names no file or folder (use . for the current folder)")
    if "\0" in text:
        raise argparse.ArgumentTypeError(f"{text!r} holds a NUL byte, which no file name can")
    path = Path(text)
    long_names = [part for part in path.parts if len(os.fsencode(part)) > NAME_MAX]
    if long_names:
        raise argparse.ArgumentTypeError(
            f"a name in it ({long_names[0][:40]!r}...) is {len(os.fsencode(long_names[0]))} bytes long, over the "
            f"{NAME_MAX} bytes a file or folder name may have"
        )
    if len(os.fsencode(os.path.abspath(text))) > PATH_ROOM:
        raise argparse.ArgumentTypeError(f"{text[:40]!r}... is over the {PATH_ROOM} bytes a folder's path may have "
                                         "here, with room for the names of the files written in it")  # fmt: skip
    return path


SEED_LIMIT = 2**64  # NumPy's generators take any non-negative int, mx.random.key an unsigned 64-bit one


def seed_int(text: str) -> int:
    """A type for a seed (--seed N): an integer in 0..2**64-1, which every random draw of the project takes."""
    value = _integer(text)
    if not 0 <= value < SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"{value} must be in 0..2**64-1")
    return value


def int_list(
    name: str, least: int = 1, most: int | None = None, *, a_set: bool = False
) -> Callable[[str], tuple[int, ...]]:
    """A type for comma-separated integers, each in least..most (e.g. --contexts 128,1024); an error names
    the first item out of range. With `a_set`, the values are a set of points to measure: a repeat is refused
    (it would be measured twice, the second run over the first), and they come back in increasing order."""

    def parse(text: str) -> tuple[int, ...]:
        try:
            values = tuple(int(part) for part in text.split(","))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}={text!r} must be comma-separated integers") from None
        bad = next((value for value in values if value < least or (most is not None and value > most)), None)
        if bad is not None:
            if most is not None:
                bound = f"in {least}..{most}"
            else:
                bound = "positive" if least == 1 else f"at least {least}"
            raise argparse.ArgumentTypeError(f"{name}={text!r} must be {bound}; {bad} is not")
        if a_set:
            repeated = sorted({value for value in values if values.count(value) > 1})
            if repeated:
                raise argparse.ArgumentTypeError(f"{name}={text!r} names {', '.join(map(str, repeated))} more than once")
            return tuple(sorted(values))
        return values

    return parse
