"""Small Markdown building blocks shared by every report page."""

from __future__ import annotations

from typing import Any, Sequence

from tabulate import tabulate


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], align: Sequence[str] | None = None) -> str:
    """A GitHub-flavoured Markdown table; `align` per column: 'left', 'right' or 'center'."""
    return tabulate(rows, headers=headers, tablefmt="pipe", colalign=align, disable_numparse=True)


def sci(value: float | None) -> str:
    """Errors span many decades: three significant digits in exponent form, '0' for exact."""
    if value is None:
        return "-"
    if value == 0:
        return "0"
    return f"{value:.2e}"


def verdict(passed: bool | None) -> str:
    if passed is None:
        return "ERROR"
    return "pass" if passed else "**FAIL**"


def code_block(text: str, *, max_lines: int = 30) -> str:
    """Fenced text, cut to `max_lines` (the JSON keeps the whole of it)."""
    lines = text.rstrip("\n").splitlines() or [""]
    if len(lines) > max_lines:
        lines = lines[:max_lines] + [f"... ({len(lines) - max_lines} more lines in the JSON)"]
    fence = "````" if any(line.startswith("```") for line in lines) else "```"
    return "\n".join([fence + "text", *lines, fence])


def inline_code(text: str) -> str:
    return f"`{text}`" if "`" not in text else f"`` {text} ``"


def header_lines(document: dict[str, Any]) -> str:
    """The facts every page opens with: what was run, where, when, how."""
    rows = [
        ("Subject", inline_code(document["subject"])),
        ("Device", document["device"]),
        ("Profile", document["profile"]),
        ("Seed", str(document["seed"]) if document["seed"] is not None else "-"),
        ("Created", document["created"]),
    ]
    return "\n".join(f"- **{name}:** {value}" for name, value in rows)
