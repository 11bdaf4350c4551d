"""The JSON Schemas of the results, one per kind: generated from the result types, kept in ``docs/schemas/``.

:data:`SCHEMAS` registers each typed result by its kind (the ``kind`` key of its ``--json``);
:func:`write_schemas` writes ``<kind>.json`` for each into a folder
(:func:`timeline.results.base.json_schema`). ``python -m timeline.results.schemas [FOLDER]``
regenerates ``docs/schemas/`` (a test checks the committed files against the code).
"""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec

from timeline.results.base import Result, json_schema
from timeline.results.collectives import CollectivesReport

__all__ = ["SCHEMAS", "schema_text", "write_schemas"]

SCHEMAS: dict[str, type[Result]] = {
    "collectives": CollectivesReport,
}
"""Each typed result's kind → its type."""

DEFAULT_FOLDER = Path(__file__).resolve().parents[2] / "docs" / "schemas"
"""Where the committed schemas live: ``docs/schemas/`` of the checkout."""


def schema_text(result: type[Result]) -> str:
    """Return a result type's JSON Schema as the text written to its file (indented, one final newline)."""
    return msgspec.json.format(msgspec.json.encode(json_schema(result)), indent=2).decode() + "\n"


def write_schemas(folder: Path) -> list[Path]:
    """Write ``<kind>.json`` for every kind of :data:`SCHEMAS` into ``folder`` (made if needed).

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
    for written_path in write_schemas(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_FOLDER):
        print(written_path)
