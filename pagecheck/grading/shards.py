"""Splitting submissions across machines: `--shard i/n` keeps the names whose stable hash falls in shard i.

The hash is sha256 of the name, so the split depends on nothing but the name:
every machine agrees without talking, and adding a submission never moves
another one to a different shard. Shards are numbered 1..n.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based
    count: int

    def __post_init__(self) -> None:
        if self.count < 1 or not 1 <= self.index <= self.count:
            raise ValueError(f"shard={self.index}/{self.count} must be i/n with 1 <= i <= n")

    def holds(self, name: str) -> bool:
        return shard_of(name, self.count) == self.index

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def shard_of(name: str, count: int) -> int:
    """The 1-based shard that `name` belongs to among `count` shards."""
    value = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big")
    return value % count + 1


def parse_shard(text: str) -> Shard:
    index, sep, count = text.partition("/")
    # isascii: str.isdigit also takes digits int() refuses, such as a superscript two.
    if not sep or not all(part.strip().isascii() and part.strip().isdigit() for part in (index, count)):
        raise ValueError(f"shard={text!r} must look like i/n, e.g. 1/4")
    return Shard(int(index), int(count))
