"""Validating pagecheck's JSON documents (reports, results, grades) against the schemas in schema/.

The schemas ship with the package; validation needs `jsonschema` (the `test` extra), imported on use.
"""

from __future__ import annotations

import json
from pathlib import Path

from typing import Any

SCHEMA_DIR = Path(__file__).resolve().parent / "schema"


def schema_kinds() -> list[str]:
    return sorted(path.name.removesuffix(".schema.json") for path in SCHEMA_DIR.glob("*.schema.json"))


def validator(kind: str) -> Any:
    """A jsonschema validator for `<kind>.schema.json` that resolves the schemas' references to each other."""
    try:
        import jsonschema
        import referencing
        from referencing.jsonschema import DRAFT202012
    except ImportError as exc:
        raise RuntimeError("validating a document needs jsonschema, a dependency of pagecheck: pip install 'jsonschema>=4.20'") from exc
    if kind not in schema_kinds():
        raise ValueError(f"kind={kind!r} has no schema; the kinds are {schema_kinds()}")
    registry = referencing.Registry().with_resources(
        (path.name, DRAFT202012.create_resource(json.loads(path.read_text())))
        for path in SCHEMA_DIR.glob("*.schema.json")
    )
    schema = json.loads((SCHEMA_DIR / f"{kind}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, registry=registry, format_checker=jsonschema.FormatChecker())


def schema_errors(kind: str, document: dict[str, Any]) -> list[str]:
    """Every way `document` departs from its schema, as `json path: message` lines (empty when it follows it)."""
    return [f"{error.json_path}: {error.message}" for error in validator(kind).iter_errors(document)]
