"""Markdown and SVG renderings of the report documents (the JSON is the source of truth)."""
