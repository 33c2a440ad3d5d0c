"""How benchmark variants and times are written, shared by bench.md, its plot and the comparison."""

from __future__ import annotations

from typing import Any

VARIANT_LABELS = {
    "subject": "subject",
    "impl": "impl (reference row)",
    "dense_gather": "dense + gather (gather timed)",
    "mlx_sdpa": "MLX SDPA on pre-gathered K/V",
}


def variant_label(variant: str, document: dict[str, Any] | None = None) -> str:
    """The variant's name in tables and plots; with the document, the subject's names its spec."""
    if variant == "subject" and document is not None:
        return f"subject {document['subject']}"
    return VARIANT_LABELS.get(variant, variant)


def microseconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 1000:
        return f"{value / 1000:.2f} ms"
    return f"{value:.0f} µs" if value >= 10 else f"{value:.1f} µs"
