"""Renderers read typed results by attribute (issue #36): string subscripts in render/, report/ and cli/.

Every result is a msgspec Struct (:mod:`timeline.results`), so a renderer never reads a result as a
dictionary. The count below is of every subscript by a string constant (``row["name"]``) in the
renderers, the report and the command line, read with ``ast``: the few left read polars rows and
bokeh's state, never a result. It must stay under 50, and a result's subscript would raise anyway.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("timeline/render", "timeline/report", "cli")
LIMIT = 50


def _string_subscripts(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Subscript)
        and isinstance(node.slice, ast.Constant)
        and isinstance(node.slice.value, str)
    ]


def test_string_subscripts_stay_under_the_limit() -> None:
    found = {
        str(path.relative_to(ROOT)): lines
        for folder in FOLDERS
        for path in sorted((ROOT / folder).rglob("*.py"))
        if (lines := _string_subscripts(path))
    }
    total = sum(len(lines) for lines in found.values())
    assert total < LIMIT, f"{total} string subscripts (at most {LIMIT - 1}): {found}"


def test_the_count_sees_a_subscript() -> None:
    """The checker itself: ``x["a"]`` counts, a list literal ``["a"]`` does not."""
    sample = ROOT / "tests" / "test_renderers_read_attributes.py"
    assert _string_subscripts(sample) == []  # this file reads nothing by a string key
    tree = ast.parse('x["a"] = ["b"]')
    assert sum(isinstance(n, ast.Subscript) for n in ast.walk(tree)) == 1
