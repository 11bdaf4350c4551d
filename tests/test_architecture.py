"""The dependency rules of the package (docs/architecture.md), checked on the code's own imports.

Every import of a module is read with ``ast``: those at module level and those inside functions
(lazy imports for start-up are still dependencies); imports under ``if TYPE_CHECKING:`` are left
out (they exist for the type checker only). The rules:

- no import cycle among the modules of ``timeline/`` (a package's ``__init__`` counts as a module);
- ``timeline/`` never imports ``cli``;
- a command module of ``cli/`` imports only the shared CLI modules (``cli.common``, ``cli.options``),
  never another command;
- the analyses (``timeline.analysis``) never import the report, capture, results, renderers,
  budgets, what-if, execution or ``cli``; the importers never import anything above them;
- the diagnosis (``timeline.diagnosis``) imports the analyses, the what-if engine and
  ``timeline.results.findings`` only: never the CLI, the renderers, the report, the budgets,
  execution or the other results;
- only ``timeline.report`` imports bokeh or holoviews, and nothing outside it imports the report at
  module level (so bokeh and holoviews load only when a report is drawn).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_CLI = {"cli.common", "cli.options", "cli.main", "cli"}


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


def _graph(package: str) -> dict[str, dict[str, bool]]:
    """Return each module of ``package`` with the project modules it imports (and whether at top level)."""
    files = sorted((ROOT / package).rglob("*.py"))
    modules = {_module_name(p): p for p in files}
    known = set(modules) | {_module_name(p) for p in (ROOT / "timeline").rglob("*.py")}
    known |= {_module_name(p) for p in (ROOT / "cli").rglob("*.py")}
    graph: dict[str, dict[str, bool]] = {}
    for name, path in modules.items():
        edges: dict[str, bool] = {}
        for target, top in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if target in known and target != name:
                edges[target] = edges.get(target, False) or top
        graph[name] = edges
    return graph


def _cycles(graph: dict[str, dict[str, bool]]) -> list[list[str]]:
    """Return the strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, {}):
            if target not in graph:
                continue
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def _parents(module: str) -> list[str]:
    """``a.b.c`` → ``a``, ``a.b``: importing a module runs its packages' ``__init__`` first."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def test_no_import_cycle_in_timeline() -> None:
    graph = _graph("timeline")
    # importing timeline.a.b runs timeline/__init__ and timeline/a/__init__ first
    for name in list(graph):
        for target in list(graph[name]):
            for parent in _parents(target):
                if parent in graph and parent != name and not name.startswith(parent + "."):
                    graph[name].setdefault(parent, graph[name][target])
    assert _cycles(graph) == []


def test_cycle_detection_finds_a_cycle() -> None:
    """The checker itself: a planted circle is found."""
    assert _cycles({"a": {"b": True}, "b": {"c": False}, "c": {"a": True}, "d": {"a": True}}) == [
        ["a", "b", "c"]
    ]


def test_timeline_never_imports_cli() -> None:
    offenders = [
        f"{name} -> {target}"
        for name, edges in _graph("timeline").items()
        for target in edges
        if target == "cli" or target.startswith("cli.")
    ]
    assert offenders == []


def test_commands_import_only_shared_cli_modules() -> None:
    offenders = [
        f"{name} -> {target}"
        for name, edges in _graph("cli").items()
        if name not in SHARED_CLI
        for target in edges
        if (target == "cli" or target.startswith("cli.")) and target not in SHARED_CLI
    ]
    assert offenders == []


FORBIDDEN = {
    "timeline.analysis": (
        "timeline.report",
        "timeline.capture",
        "timeline.results",
        "timeline.render",
        "timeline.budgets",
        "timeline.whatif",
        "timeline.execution",
        "cli",
    ),
    "timeline.importers": (
        "timeline.analysis",
        "timeline.report",
        "timeline.capture",
        "timeline.results",
        "timeline.render",
        "timeline.budgets",
        "timeline.whatif",
        "timeline.execution",
        "timeline.trace",
        "cli",
    ),
    "timeline.results": ("timeline.render", "timeline.report", "cli"),
    "timeline.render": ("timeline.report", "timeline.capture", "timeline.execution", "cli"),
    "timeline.whatif": ("timeline.report", "timeline.capture", "timeline.render", "cli"),
    "timeline.budgets": ("timeline.report", "timeline.capture", "timeline.render", "cli"),
    "timeline.diagnosis": (
        "timeline.report",
        "timeline.capture",
        "timeline.render",
        "timeline.budgets",
        "timeline.execution",
        "timeline.results.summary",
        "timeline.results.collectives",
        "timeline.results.whatif",
        "timeline.results.verdicts",
        "timeline.results.diagnosis",
        "timeline.results.diff",
        "cli",
    ),
}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_layers_import_only_downwards(package: str) -> None:
    offenders = [
        f"{name} -> {target}"
        for name, edges in _graph("timeline").items()
        if name == package or name.startswith(package + ".")
        for target in edges
        if any(target == bad or target.startswith(bad + ".") for bad in FORBIDDEN[package])
    ]
    assert offenders == []


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
