"""The JSON Schemas in ``docs/schemas/`` are those the result types give (``-m timeline.results.schemas``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgspec

from tests.builders import REPO
from timeline.results.base import Result
from timeline.results.schemas import SCHEMAS, write_schemas

COMMITTED = REPO / "docs" / "schemas"


def test_the_committed_schemas_are_the_codes(tmp_path: Path) -> None:
    written = write_schemas(tmp_path)
    assert [p.name for p in written] == [f"{kind}.json" for kind in SCHEMAS]
    for path in written:
        committed = COMMITTED / path.name
        assert committed.exists(), f"{committed} missing: run python -m timeline.results.schemas"
        assert committed.read_text(encoding="utf-8") == path.read_text(encoding="utf-8"), (
            f"{committed} is stale: run python -m timeline.results.schemas"
        )


def test_every_kind_is_its_types_tag() -> None:
    for kind, result in SCHEMAS.items():
        assert issubclass(result, Result)
        assert result.__struct_config__.tag == kind
        schema = msgspec.json.decode((COMMITTED / f"{kind}.json").read_bytes())
        assert schema["$defs"][result.__name__]["properties"]["kind"] == {"enum": [kind]}


def test_the_module_writes_into_a_folder(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "timeline.results.schemas", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{kind}.json" for kind in SCHEMAS)
