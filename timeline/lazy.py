"""A package's public names, listed once in its stub and imported on first use (PEP 562).

A package's ``__init__.pyi`` lists its public names as the imports that define them
(``from timeline.run import Run as Run``): type checkers read the stub as the package's interface,
and :func:`attach_stub` reads the same lines when the package is imported, to give it ``__all__``,
``__getattr__`` (each name imported from its module when first used) and ``__dir__``. This is
scientific-python's SPEC 1 layout (``lazy_loader.attach_stub``), in a few lines of our own.

No public name of a package is also the name of one of its modules (a test checks), so importing a
module never rebinds a public name.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from importlib import import_module
from pathlib import Path
from typing import Any

__all__ = ["attach_stub"]


def attach_stub(
    package: str, init_file: str | None
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """Return ``__getattr__``, ``__dir__`` and ``__all__`` of ``package`` from its ``__init__.pyi``.

    Parameters
    ----------
    package
        The package's name (its ``__name__``).
    init_file
        Its ``__init__.py`` (its ``__file__``); the stub lies beside it.

    Returns
    -------
    tuple
        ``__getattr__`` (imports a public name from its module, once), ``__dir__`` (the public
        names) and ``__all__`` (the public names, in the stub's order).

    Raises
    ------
    ValueError
        A stub line that imports no public name the way the layout says (``from M import N as N``).
    """
    if init_file is None:  # pragma: no cover - a package always has its file
        raise ValueError(f"{package}: no __init__.py to find the stub beside")
    stub = Path(init_file).with_suffix(".pyi")
    names = _stub_names(stub)

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(module), name)

    def __dir__() -> list[str]:
        return sorted(names)

    return __getattr__, __dir__, list(names)


def _stub_names(stub: Path) -> dict[str, str]:
    """Return each public name of a stub → the module that defines it, in the stub's order."""
    names: dict[str, str] = {}
    for node in ast.parse(stub.read_text(encoding="utf-8"), str(stub)).body:
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level or node.module is None:
            raise ValueError(f"{stub}:{node.lineno}: import by the module's whole name")
        for alias in node.names:
            if alias.asname != alias.name:
                raise ValueError(
                    f"{stub}:{node.lineno}: a public name is written `{alias.name} as {alias.name}`"
                )
            names[alias.name] = node.module
    return names
