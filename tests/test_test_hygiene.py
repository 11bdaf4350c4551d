"""Hygiene of the tests themselves, checked on the source of every module under ``tests/``.

- No test waits for time to pass or reads the clock: a ``sleep`` (``time.sleep``, ``asyncio.sleep``,
  Playwright's ``wait_for_timeout``) only hopes that something happened meanwhile, and a
  ``time.time()``/``monotonic()``/``perf_counter()`` makes a deadline or a timing assertion of the
  machine's load. Tests wait on the condition itself: an event, a barrier, a queue, a join, a
  condition polled by the browser, with a bound that only a broken behaviour reaches.
- No module imports from a ``test_*`` module, nor a private (``_name``) helper of another tests
  module, nor another package's helpers: builders shared by packages live in ``tests/builders.py``,
  generators of whole traces that copy real writers' layouts in ``tests/generators/`` (the NCCL
  DeviceMesh jobs of ``tests/generators/nccl.py``, #20), and a package's own helpers in that package
  (``tests/report/builders.py``, ``tests/budgets/runs.py``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
SHARED = "tests.builders"
GENERATORS = "tests.generators"
"""Trace generators shared by every package (they import no test module)."""

# Functions of the ``time`` module that read the clock or wait for it.
CLOCK = frozenset(
    {"sleep", "time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns"}
)
# Callees that wait for time to pass, whatever they are called on.
WAITS = frozenset({"sleep", "wait_for_timeout"})

# "tests/path.py::callee" -> why that wait is not a race. Nothing needs one: keep it so.
ALLOWED: dict[str, str] = {}


@dataclass(frozen=True)
class Module:
    """A module under ``tests/``: its dotted name and the package it sits in."""

    name: str
    package: str

    @classmethod
    def of(cls, path: Path) -> Module:
        parts = list(path.relative_to(TESTS.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
            return cls(".".join(parts), ".".join(parts))
        return cls(".".join(parts), ".".join(parts[:-1]))

    @property
    def area(self) -> str:
        """``tests.X`` for a module in the package ``tests/X``, else ``tests``."""
        return ".".join(self.package.split(".")[:2])


def _dotted(node: ast.expr) -> list[str] | None:
    """``a.b.c`` as ``["a", "b", "c"]``; None for anything but names and attributes."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def clock_findings(source: str, where: str) -> list[str]:
    """The calls in ``source`` that wait for time to pass or read the clock."""
    tree = ast.parse(source)
    time_modules: set[str] = set()  # names bound to the time module
    from_time: dict[str, str] = {}  # local name -> function of the time module
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            time_modules |= {a.asname or a.name for a in node.names if a.name == "time"}
        elif isinstance(node, ast.ImportFrom) and node.module == "time" and node.level == 0:
            from_time |= {a.asname or a.name: a.name for a in node.names}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        if name is not None and len(name) == 2 and name[0] in time_modules and name[1] in CLOCK:
            callee = f"time.{name[1]}"
        elif name is not None and len(name) == 1 and from_time.get(name[0]) in CLOCK:
            callee = f"time.{from_time[name[0]]}"
        elif isinstance(node.func, ast.Attribute) and node.func.attr in WAITS:
            callee = ".".join(name) if name else node.func.attr
        elif isinstance(node.func, ast.Name) and node.func.id in WAITS:
            callee = node.func.id
        else:
            continue
        if f"{where}::{callee}" not in ALLOWED:
            found.append(f"{where}:{node.lineno}: {callee}() waits for or reads the clock")
    return found


def _import_problem(module: Module, target: str, name: str | None) -> str | None:
    """What is wrong with ``module`` importing ``name`` from ``target`` (or the module ``target``)."""
    if target != "tests" and not target.startswith("tests."):
        return None
    dotted = target.split(".") + ([name] if name else [])
    if any(part.startswith("test_") for part in dotted[1:]):
        return "a test module's contents"
    if any(part.startswith("_") for part in dotted[1:]):
        return "a private name of another tests module"
    home = ".".join(dotted[:2])  # the module, or the package, the import reaches into
    if home in ("tests", SHARED, GENERATORS, module.area):
        return None
    return f"another package's helpers ({home}): shared builders belong in {SHARED}"


def import_findings(source: str, module: Module, where: str) -> list[str]:
    """The imports in ``source`` that reach into test modules, private helpers or other packages."""
    tree = ast.parse(source)
    aliases: dict[str, str] = {}  # local name -> the tests module an ``import tests...`` bound it to
    found = []
    for node in ast.walk(tree):
        problems: list[tuple[str, str | None]]
        if isinstance(node, ast.Import):
            problems = [(alias.name, None) for alias in node.names]
            for alias in node.names:
                if alias.name.split(".")[0] == "tests":
                    aliases[alias.asname or "tests"] = alias.name if alias.asname else "tests"
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                base = module.package.split(".")[: len(module.package.split(".")) - node.level + 1]
                target = ".".join([*base, *([target] if target else [])])
            problems = [(target, alias.name) for alias in node.names]
        else:
            continue
        for target, name in problems:
            problem = _import_problem(module, target, name)
            if problem is not None:
                shown = f"{target}.{name}" if name else target
                found.append(f"{where}:{node.lineno}: imports {shown}: {problem}")
    for node in ast.walk(tree):  # tests.cli._helper() after ``import tests.cli``
        if not isinstance(node, ast.Attribute):
            continue
        chain = _dotted(node)
        if chain is None or chain[0] not in aliases or not chain[-1].startswith(("_", "test_")):
            continue
        dotted = [*aliases[chain[0]].split("."), *chain[1:]]
        problem = _import_problem(module, ".".join(dotted[:-1]), dotted[-1])
        if problem is not None:
            found.append(f"{where}:{node.lineno}: uses {'.'.join(dotted)}: {problem}")
    return found


def _sources() -> list[tuple[Path, str]]:
    paths = sorted(TESTS.rglob("*.py"))
    assert len(paths) > 40, "the tests were not found"
    return [(path, path.read_text(encoding="utf-8")) for path in paths]


def test_no_test_sleeps_or_reads_the_clock() -> None:
    found = [
        problem
        for path, source in _sources()
        for problem in clock_findings(source, str(path.relative_to(TESTS.parent)))
    ]
    assert found == []


def test_no_test_module_imports_from_another_ones() -> None:
    found = [
        problem
        for path, source in _sources()
        for problem in import_findings(source, Module.of(path), str(path.relative_to(TESTS.parent)))
    ]
    assert found == []


# --- the checks themselves find what they are meant to ---------------------------------------------------

REPORT = Module("tests.report.test_x", "tests.report")
TOP = Module("tests.test_x", "tests")
CLI = Module("tests.cli.test_x", "tests.cli")


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import time\ntime.sleep(0.1)\n", "time.sleep()"),
        ("import time as t\nt.sleep(1)\n", "time.sleep()"),
        ("from time import sleep\nsleep(1)\n", "time.sleep()"),
        ("from time import sleep as nap\nnap(1)\n", "time.sleep()"),
        ("import time\nwhile time.monotonic() < 3:\n    pass\n", "time.monotonic()"),
        ("import time\nt0 = time.perf_counter()\n", "time.perf_counter()"),
        ("import time\nt0 = time.time()\n", "time.time()"),
        ("from time import monotonic\nmonotonic()\n", "time.monotonic()"),
        ("import asyncio\nasync def f() -> None:\n    await asyncio.sleep(1)\n", "asyncio.sleep()"),
        ("page.wait_for_timeout(500)\n", "page.wait_for_timeout()"),
        ("def f() -> None:\n    import time\n\n    time.sleep(0.02)\n", "time.sleep()"),
    ],
)
def test_the_clock_check_finds(source: str, expected: str) -> None:
    found = clock_findings(source, "tests/t.py")
    assert len(found) == 1
    assert f": {expected} waits for or reads the clock" in found[0]


@pytest.mark.parametrize(
    "source",
    [
        "import threading\nthreading.Event().wait(5)\n",
        "import time\ntime.strftime('%Y')\n",
        "event.wait(timeout=10)\n",
        "server.wait(timeout=20)\n",
    ],
)
def test_the_clock_check_passes(source: str) -> None:
    assert clock_findings(source, "tests/t.py") == []


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        (REPORT, "from tests.cli.test_errors import CASES\n", "a test module's contents"),
        (REPORT, "from tests.report.test_data import helper\n", "a test module's contents"),
        (REPORT, "from tests.report import test_data\n", "a test module's contents"),
        (REPORT, "import tests.report.test_data\n", "a test module's contents"),
        (REPORT, "from .test_data import helper\n", "a test module's contents"),
        (REPORT, "from tests.builders import _private\n", "a private name"),
        (REPORT, "from tests.report.builders import _private\n", "a private name"),
        (REPORT, "from tests.cli import _timeline_command\n", "a private name"),
        (REPORT, "from tests.scale import CASES\n", "another package's helpers (tests.scale)"),
        (TOP, "from tests.report.builders import synthetic_events\n", "another package's helpers"),
        (CLI, "import tests.cli\ntests.cli._timeline_command()\n", "a private name"),
        (CLI, "import tests.cli as c\nc._timeline_command()\n", "a private name"),
    ],
)
def test_the_import_check_finds(module: Module, source: str, expected: str) -> None:
    found = import_findings(source, module, "tests/t.py")
    assert len(found) == 1, found
    assert expected in found[0]


@pytest.mark.parametrize(
    ("module", "source"),
    [
        (REPORT, "from tests.builders import REPO, make_events\n"),
        (REPORT, "from tests.report.builders import synthetic_events\n"),
        (REPORT, "from tests import builders\n"),
        (TOP, "from tests.builders import REPO\n"),
        (Module("tests.scale.test_x", "tests.scale"), "from tests.scale import CASES\n"),
        (REPORT, "from timeline.importers.kineto import _MAX_US\n"),  # the library's, not a test's
        (REPORT, "import timeline.trace\n"),
        (CLI, "import tests.cli\ntests.cli.run()\n"),
    ],
)
def test_the_import_check_passes(module: Module, source: str) -> None:
    assert import_findings(source, module, "tests/t.py") == []
