"""argparse types that several programs share; each error names the option and the bad text.

Kept free of heavy imports: `python -m pagecheck.bench.attention` child processes parse their options with it.
"""

from __future__ import annotations

import argparse
from typing import Callable


def positive_int(text: str) -> int:
    """A type for one integer of at least 1 (e.g. --calls 60); argparse names the option in its error."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be positive")
    return value


def int_list(name: str, least: int = 1) -> Callable[[str], tuple[int, ...]]:
    """A type for comma-separated integers, each at least `least` (e.g. --contexts 128,1024)."""

    def parse(text: str) -> tuple[int, ...]:
        try:
            values = tuple(int(part) for part in text.split(","))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name}={text!r} must be comma-separated integers") from None
        if min(values) < least:
            bound = "positive" if least == 1 else f"at least {least}"
            raise argparse.ArgumentTypeError(f"{name}={text!r} must be {bound}")
        return values

    return parse
