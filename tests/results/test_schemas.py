"""The JSON Schemas in ``docs/schemas/`` are those of the result types (``timeline.results.schemas``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from tests.builders import REPO
from timeline.results.schemas import SCHEMAS, write_schemas

DOCS = REPO / "docs" / "schemas"


def test_the_committed_schemas_are_those_of_the_code(tmp_path: Path) -> None:
    written = write_schemas(tmp_path)
    assert [path.name for path in written] == [f"{kind}.json" for kind in SCHEMAS]
    assert sorted(p.name for p in DOCS.glob("*.json")) == sorted(p.name for p in written)
    for path in written:
        committed = DOCS / path.name
        assert committed.read_text(encoding="utf-8") == path.read_text(encoding="utf-8"), (
            f"{committed} is out of date: run python -m timeline.results.schemas"
        )


@pytest.mark.parametrize("kind", sorted(SCHEMAS))
def test_each_schema_names_its_kind(kind: str) -> None:
    schema = msgspec.json.decode((DOCS / f"{kind}.json").read_bytes())
    name = schema["$ref"].removeprefix("#/$defs/")
    assert name == SCHEMAS[kind].__name__
    assert schema["$defs"][name]["properties"]["kind"] == {"enum": [kind]}
    assert schema["$defs"][name]["required"][0] == "kind"


def test_the_module_writes_them(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "timeline.results.schemas", str(tmp_path)], check=True, timeout=120, cwd=REPO
    )
    for kind in SCHEMAS:
        assert (tmp_path / f"{kind}.json").read_bytes() == (DOCS / f"{kind}.json").read_bytes()
