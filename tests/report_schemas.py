"""Validators for the report JSON documents, built from reports/schema/ (shared by the report tests)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import referencing
from referencing.jsonschema import DRAFT202012

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "reports" / "schema"


def validator(kind: str) -> jsonschema.Draft202012Validator:
    """A validator for `<kind>.schema.json` that resolves the schemas' references to each other."""
    registry = referencing.Registry().with_resources(
        (path.name, DRAFT202012.create_resource(json.loads(path.read_text())))
        for path in SCHEMA_DIR.glob("*.schema.json")
    )
    schema = json.loads((SCHEMA_DIR / f"{kind}.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, registry=registry, format_checker=jsonschema.FormatChecker())


def schema_errors(kind: str, document: dict) -> list[str]:
    return [f"{error.json_path}: {error.message}" for error in validator(kind).iter_errors(document)]
