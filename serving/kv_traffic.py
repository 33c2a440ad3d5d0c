"""Bytes of K/V copied to build attention inputs, counted where the copies are made."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class KvTraffic:
    # Dense batch K/V rebuilt from per-request buffers (the dense variant).
    repack_bytes: int = 0
    # Pages gathered into dense K/V through the block table (the gather ablation).
    gather_bytes: int = 0

    @property
    def total_bytes(self) -> int:
        return self.repack_bytes + self.gather_bytes
