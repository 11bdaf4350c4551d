"""The JSON Schemas in ``docs/schemas/`` are what the result types give (``timeline.results.schemas``).

Each committed file is compared with the schema regenerated into a temporary folder; every result
type's schema validates the tag (``kind``) and is written under its kind.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from tests.builders import REPO
from timeline.results.schemas import SCHEMAS, main, write_schemas

DOCS = REPO / "docs" / "schemas"


def test_the_committed_schemas_are_what_the_code_gives(tmp_path: Path) -> None:
    written = write_schemas(tmp_path)
    assert sorted(p.name for p in written) == sorted(f"{kind}.json" for kind in SCHEMAS)
    for path in written:
        committed = DOCS / path.name
        assert committed.is_file(), f"{committed} missing: run python -m timeline.results.schemas"
        assert committed.read_text(encoding="utf-8") == path.read_text(encoding="utf-8"), (
            f"{committed} is stale: run python -m timeline.results.schemas"
        )


def test_no_schema_is_left_over_in_docs() -> None:
    assert sorted(p.name for p in DOCS.glob("*.json")) == sorted(f"{kind}.json" for kind in SCHEMAS)


@pytest.mark.parametrize("kind", sorted(SCHEMAS))
def test_each_schema_names_its_kind(kind: str) -> None:
    schema = msgspec.json.decode((DOCS / f"{kind}.json").read_bytes())
    name = schema["$ref"].rsplit("/", 1)[-1]
    assert name == SCHEMAS[kind].__name__
    definition = schema["$defs"][name]
    assert definition["properties"]["kind"] == {"enum": [kind]}
    # kind, version and timeline come first, as in every result's JSON
    assert list(definition["properties"])[:3] == ["kind", "version", "timeline"]


def test_the_command_writes_into_the_folder_it_is_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out.split()
    assert sorted(Path(p).name for p in printed) == sorted(f"{kind}.json" for kind in SCHEMAS)
    assert all(Path(p).is_file() for p in printed)
