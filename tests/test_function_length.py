"""No function or method in ``timeline/`` is longer than 100 lines.

A function's length counts from its ``def`` line (decorators excluded) to its last line, docstring
included. Long functions are split into named steps (private helpers) instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "timeline"
MAX_LINES = 100


def _long_functions(root: Path, limit: int) -> list[str]:
    """Return ``path:line name (N lines)`` for every function under ``root`` longer than ``limit``."""
    offenders = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None:
                length = node.end_lineno - node.lineno + 1
                if length > limit:
                    where = path.relative_to(root.parent)
                    offenders.append(f"{where}:{node.lineno} {node.name} ({length} lines)")
    return offenders


def test_the_package_is_found() -> None:
    assert (PACKAGE / "__init__.py").is_file()


def test_no_function_is_longer_than_100_lines() -> None:
    offenders = _long_functions(PACKAGE, MAX_LINES)
    assert not offenders, (
        f"functions longer than {MAX_LINES} lines (split them into named steps):\n" + "\n".join(offenders)
    )


def test_the_length_counts_from_def_to_end(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    body = "\n".join(f"    x{k} = {k}" for k in range(3))
    method = "\n".join(f"        y{k} = {k}" for k in range(3))
    (package / "mod.py").write_text(
        f"@staticmethod\ndef short():\n{body}\n\n\nclass C:\n    def m(self):\n{method}\n"
    )
    assert _long_functions(package, 4) == []
    assert _long_functions(package, 3) == ["pkg/mod.py:2 short (4 lines)", "pkg/mod.py:9 m (4 lines)"]
