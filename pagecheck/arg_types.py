"""argparse types that several programs share; each error names the option and the bad text.

Kept free of heavy imports: `python -m pagecheck.bench.attention` child processes parse their options with it.
"""

from __future__ import annotations

import argparse
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


def non_negative_int(text: str) -> int:
    """A type for one integer of at least 0 (e.g. --jobs 0, which means no worker processes)."""
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must be 0 or more")
    return value


def int_list(name: str, least: int = 1, most: int | None = None) -> Callable[[str], tuple[int, ...]]:
    """A type for comma-separated integers, each in least..most (e.g. --contexts 128,1024); an error names
    the first item out of range."""

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
        return values

    return parse
