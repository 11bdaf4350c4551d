"""docs/schemas holds the JSON Schemas the result types give (``python -m timeline.results.schemas``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgspec

from tests.builders import REPO
from timeline.results.base import Result
from timeline.results.schemas import SCHEMAS, write_schemas

DOCS = REPO / "docs" / "schemas"


def test_every_committed_schema_is_regenerated_identically(tmp_path: Path) -> None:
    written = write_schemas(tmp_path)
    assert sorted(p.name for p in written) == sorted(f"{kind}.json" for kind in SCHEMAS)
    for path in written:
        committed = DOCS / path.name
        assert committed.is_file(), f"{committed} is missing: run python -m timeline.results.schemas"
        assert path.read_text(encoding="utf-8") == committed.read_text(encoding="utf-8"), (
            f"docs/schemas/{path.name} is out of date: run python -m timeline.results.schemas"
        )
    assert sorted(p.name for p in DOCS.glob("*.json")) == sorted(p.name for p in written)


def test_each_kind_is_its_types_tag_and_its_schema_names_it() -> None:
    for kind, result in SCHEMAS.items():
        assert issubclass(result, Result)
        assert result.__struct_config__.tag == kind
        schema = msgspec.json.decode((DOCS / f"{kind}.json").read_bytes())
        definition = schema["$defs"][schema["$ref"].rsplit("/", 1)[-1]]
        assert definition["properties"]["kind"] == {"enum": [kind]}
        assert list(definition["properties"])[:3] == ["kind", "version", "timeline"]


def test_the_module_writes_into_a_folder(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "timeline.results.schemas", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.split()) == sorted(str(tmp_path / f"{kind}.json") for kind in SCHEMAS)


def test_no_result_type_holds_any() -> None:
    text = "\n".join((DOCS / f"{kind}.json").read_text(encoding="utf-8") for kind in SCHEMAS)
    # msgspec writes Any as an empty schema: no property may be {}
    assert ": {}" not in text
