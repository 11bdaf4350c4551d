"""Packages' public names: listed once, in each package's stub, and imported on first use (#36).

Each package's ``__init__.pyi`` names its public objects as imports from the modules that define
them; :func:`timeline.lazy.attach_stub` reads it. Checked here against the stubs read independently
(``ast``) and against the package folders: every name is its module's object, no name is also a
module of its package (importing the module would rebind it), and a name not listed is an error.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

from timeline.lazy import attach_stub

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = sorted(
    ".".join(stub.parent.relative_to(ROOT).parts) for stub in (ROOT / "timeline").rglob("__init__.pyi")
)


def _stub(package: str) -> list[tuple[str, str]]:
    """The (name, module) pairs of a package's stub, in its order, read with ``ast``."""
    path = ROOT.joinpath(*package.split("."), "__init__.pyi")
    return [
        (alias.name, node.module or "")
        for node in ast.parse(path.read_text(encoding="utf-8")).body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    ]


def test_the_packages_with_stubs() -> None:
    assert PACKAGES == [
        "timeline",
        "timeline.budgets",
        "timeline.diagnosis",
        "timeline.execution",
        "timeline.report",
        "timeline.whatif",
    ]


@pytest.mark.parametrize("package", PACKAGES)
def test_each_public_name_is_its_modules_object(package: str) -> None:
    module = importlib.import_module(package)
    pairs = _stub(package)
    assert module.__all__ == [name for name, _ in pairs]
    assert dir(module) == sorted(name for name, _ in pairs)
    for name, defined_in in pairs:
        assert getattr(module, name) is getattr(importlib.import_module(defined_in), name), name


@pytest.mark.parametrize("package", PACKAGES)
def test_no_public_name_is_a_module_of_its_package(package: str) -> None:
    folder = ROOT.joinpath(*package.split("."))
    modules = {info.name for info in pkgutil.iter_modules([str(folder)])}
    assert modules & {name for name, _ in _stub(package)} == set()


@pytest.mark.parametrize("package", PACKAGES)
def test_an_unlisted_name_is_an_attribute_error(package: str) -> None:
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'not_a_name'"):
        _ = importlib.import_module(package).not_a_name


def test_importing_a_package_imports_none_of_its_modules() -> None:
    code = (
        "import sys, timeline, timeline.whatif, timeline.budgets, timeline.execution, timeline.report, "
        "timeline.diagnosis; print(sorted(m for m in sys.modules if m.startswith('timeline')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == str(
        [
            "timeline",
            "timeline.budgets",
            "timeline.diagnosis",
            "timeline.execution",
            "timeline.lazy",
            "timeline.report",
            "timeline.whatif",
        ]
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("from timeline.run import Run\n", "a public name is written `Run as Run`"),
        ("from .run import Run as Run\n", "import by the module's whole name"),
    ],
)
def test_a_stub_off_the_layout_is_refused(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "__init__.pyi").write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        attach_stub("package", str(tmp_path / "__init__.py"))
