"""The JSON Schema of each result kind, generated from its type and kept in ``docs/schemas/``.

Takes the result types (:data:`SCHEMAS`, kind → type) and gives their JSON Schemas
(:func:`timeline.results.base.json_schema`): :func:`write_schemas` writes one file per kind,
``<kind>.json``, and ``python -m timeline.results.schemas [FOLDER]`` runs it (default
``docs/schemas``). A test regenerates them and compares them with the committed files.
"""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec

from timeline.results.base import Result, json_schema
from timeline.results.whatif import SeedReport, WhatIfReport

__all__ = ["SCHEMAS", "schema_text", "write_schemas"]

SCHEMAS: dict[str, type[Result]] = {
    "whatif": WhatIfReport,
    "seed": SeedReport,
}
"""Every result kind (its ``kind`` tag) and its type."""


def schema_text(result: type[Result]) -> str:
    """Return the JSON Schema of a result type as indented JSON text, ending with a newline."""
    return msgspec.json.format(msgspec.json.encode(json_schema(result)), indent=2).decode() + "\n"


def write_schemas(folder: Path) -> list[Path]:
    """Write ``<kind>.json`` for every kind of :data:`SCHEMAS` into ``folder`` (created if needed).

    Returns
    -------
    list[Path]
        The files written, in the order of :data:`SCHEMAS`.
    """
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for kind, result in SCHEMAS.items():
        path = folder / f"{kind}.json"
        path.write_text(schema_text(result), encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    for path in write_schemas(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/schemas")):
        print(path)
