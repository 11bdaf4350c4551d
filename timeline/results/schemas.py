"""The JSON Schema of every kind of result, as ``docs/schemas/<kind>.json`` holds it.

Takes the result types (:data:`SCHEMAS`, by kind) and gives their JSON Schemas
(:func:`timeline.results.base.json_schema`), written by :func:`write_schemas`. Run
``python -m timeline.results.schemas [FOLDER]`` (default ``docs/schemas``) after changing a result
type; ``tests/results/test_schemas.py`` checks that the committed files are what the code gives.
"""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec

from timeline.results.base import Result, json_schema
from timeline.results.collectives import CollectivesReport
from timeline.results.diagnosis import DiagnosisReport
from timeline.results.diff import Diff
from timeline.results.flight_recorder import FlightReport
from timeline.results.summary import Summary
from timeline.results.verdicts import CheckReport
from timeline.results.whatif import SeedReport, WhatIfReport

__all__ = ["SCHEMAS", "main", "schema_text", "write_schemas"]

SCHEMAS: dict[str, type[Result]] = {
    "check": CheckReport,
    "collectives": CollectivesReport,
    "diagnosis": DiagnosisReport,
    "diff": Diff,
    "flight_recorder": FlightReport,
    "seed": SeedReport,
    "summary": Summary,
    "whatif": WhatIfReport,
}
"""Every typed result, by its kind (the ``kind`` key of its JSON, the type's tag)."""


def schema_text(result: type[Result]) -> str:
    """Return the JSON Schema of a result type as its file holds it: indented by 2, a final newline."""
    return msgspec.json.format(msgspec.json.encode(json_schema(result)), indent=2).decode() + "\n"


def write_schemas(folder: str | Path) -> list[Path]:
    """Write ``<kind>.json`` for every result of :data:`SCHEMAS` into ``folder`` (made if missing).

    Returns
    -------
    list[Path]
        The files written, by kind.
    """
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for kind, result in sorted(SCHEMAS.items()):
        path = out / f"{kind}.json"
        path.write_text(schema_text(result), encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str]) -> int:
    """Write the schemas into ``argv[0]`` (default ``docs/schemas``); return the exit code."""
    folder = argv[0] if argv else "docs/schemas"
    for path in write_schemas(folder):
        sys.stdout.write(f"{path}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
