"""The JSON Schema of each kind of result, written to ``docs/schemas/<kind>.json``.

:data:`SCHEMAS` maps a result's kind (its ``kind`` key) to its type; :func:`write_schemas` writes
each type's schema (:func:`timeline.results.base.json_schema`) as ``<kind>.json`` in a folder, and
``python -m timeline.results.schemas [FOLDER]`` writes them into ``docs/schemas`` (default). A test
regenerates them and compares with the committed files.
"""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec

from timeline.results.base import Result, json_schema
from timeline.results.diff import Diff
from timeline.results.verdicts import CheckReport

__all__ = ["SCHEMAS", "schema_text", "write_schemas"]

SCHEMAS: dict[str, type[Result]] = {
    "check": CheckReport,
    "diff": Diff,
}
"""Every kind of result → its type."""


def schema_text(result: type[Result]) -> str:
    """Return a result type's JSON Schema as the text of its file (indented, final newline)."""
    encoded = msgspec.json.encode(json_schema(result))
    return msgspec.json.format(encoded, indent=2).decode() + "\n"


def write_schemas(folder: str | Path) -> list[Path]:
    """Write ``<kind>.json`` for every kind of :data:`SCHEMAS` into ``folder``; return the files written."""
    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for kind, result in SCHEMAS.items():
        path = target / f"{kind}.json"
        path.write_text(schema_text(result), encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":  # pragma: no cover - the tests call write_schemas
    for written_path in write_schemas(sys.argv[1] if len(sys.argv) > 1 else "docs/schemas"):
        print(written_path)
