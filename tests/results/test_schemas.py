"""The JSON Schemas in ``docs/schemas/``: what the result types give, one file per kind, no other."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec

from tests.builders import REPO
from timeline.results.base import Result
from timeline.results.schemas import SCHEMAS, write_schemas

COMMITTED = REPO / "docs" / "schemas"


def test_the_committed_schemas_are_what_the_types_give(tmp_path: Path) -> None:
    written = write_schemas(tmp_path)
    assert sorted(p.name for p in written) == sorted(f"{kind}.json" for kind in SCHEMAS)
    for path in written:
        committed = COMMITTED / path.name
        assert committed.exists(), f"{committed} missing: run python -m timeline.results.schemas"
        assert path.read_text(encoding="utf-8") == committed.read_text(encoding="utf-8"), path.name
    assert sorted(p.name for p in COMMITTED.glob("*.json")) == sorted(p.name for p in written)


def test_each_kind_is_its_types_tag_and_its_schema_names_it() -> None:
    for kind, result in SCHEMAS.items():
        assert issubclass(result, Result)
        assert result.__struct_config__.tag == kind
        schema = msgspec.json.decode((COMMITTED / f"{kind}.json").read_bytes())
        definition = schema["$defs"][schema["$ref"].rsplit("/", 1)[-1]]
        assert definition["properties"]["kind"] == {"enum": [kind]}
        assert definition["required"][0] == "kind"


def _untyped(node: Any, where: str = "$") -> list[str]:
    """Where a schema admits any value: ``{}`` (Any), an object or array whose contents are unstated."""
    if isinstance(node, list):
        return [hit for i, item in enumerate(node) for hit in _untyped(item, f"{where}[{i}]")]
    if not isinstance(node, dict):
        return []
    hits = [where] if node == {} else []
    if node.get("type") == "object" and not {"properties", "additionalProperties"} & set(node):
        hits.append(where)
    if node.get("type") == "array" and "items" not in node and "prefixItems" not in node:
        hits.append(where)
    # a "default" is a value, not a type: an empty dict or list there admits nothing
    nested = ((key, value) for key, value in node.items() if key != "default")
    return hits + [hit for key, value in nested for hit in _untyped(value, f"{where}.{key}")]


def test_no_result_admits_untyped_values() -> None:
    """No ``Any``, no ``dict[str, Any]``, no bare ``list``: every value of every result has a type."""
    for kind, result in SCHEMAS.items():
        schema = msgspec.json.schema(result)
        assert _untyped(schema) == [], kind


def test_the_module_writes_into_a_folder(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "timeline.results.schemas", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.split()) == sorted(str(tmp_path / f"{kind}.json") for kind in SCHEMAS)
