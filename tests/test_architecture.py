"""What the import contracts cannot say (docs/architecture.md).

The layers, the independence of the commands, the absence of cycles and who may import bokeh are
import-linter contracts in ``pyproject.toml``, run by ``lint-imports`` in ``.ci/check``. Checked
here, on the code's own imports read with ``ast`` (imports under ``if TYPE_CHECKING:`` left out):

- nothing outside ``timeline.report`` imports the report at module level, so bokeh and holoviews
  load only when a report is drawn;
- every public function's options are keyword-only.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[tuple[str, bool]]:
    """Yield ``(imported module, at module level)`` for each import outside TYPE_CHECKING blocks."""

    def visit(node: ast.AST, top: bool) -> Iterator[tuple[str, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                yield from (item for stmt in child.orelse for item in visit(stmt, top))
                continue
            if isinstance(child, ast.Import):
                yield from ((alias.name, top) for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                yield child.module, top
                # ``from timeline import policy``: a submodule
                yield from ((f"{child.module}.{alias.name}", top) for alias in child.names)
            inner = top and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            yield from visit(child, inner)

    yield from visit(tree, True)


def test_only_the_report_imports_bokeh_and_holoviews_and_only_lazily() -> None:
    offenders = []
    for path in sorted((ROOT / "timeline").rglob("*.py")) + sorted((ROOT / "cli").rglob("*.py")):
        name = _module_name(path)
        inside = name.startswith("timeline.report")
        for target, top in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if target.split(".")[0] in ("bokeh", "holoviews") and not inside:
                offenders.append(f"{name} -> {target}")
            if target.startswith("timeline.report") and top and not inside:
                offenders.append(f"{name} -> {target} (module level)")
    assert offenders == []


def test_public_options_are_keyword_only() -> None:
    """Every public function's parameters with a default (its options) are keyword-only."""
    import importlib
    import inspect
    import pkgutil

    import timeline

    names = ["timeline", *(m.name for m in pkgutil.walk_packages(timeline.__path__, "timeline."))]
    offenders = []
    for module_name in names:
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", []):
            function = getattr(module, name, None)
            if not inspect.isfunction(function):
                continue
            parameters = list(inspect.signature(function).parameters.values())[1:]
            positional = [
                p.name
                for p in parameters
                if p.kind in (p.POSITIONAL_OR_KEYWORD, p.POSITIONAL_ONLY) and p.default is not p.empty
            ]
            if positional:
                offenders.append(f"{module_name}.{name}({', '.join(positional)})")
    assert sorted(set(offenders)) == []
