"""Names of a package imported on first use (PEP 562), so that importing the package costs nothing.

``timeline`` and its subpackages (``execution``, ``whatif``, ``budgets``, ``diagnosis``, ``report``)
list their public names with the module each lives in; :func:`lazy_names` gives the package's
``__getattr__`` and ``__dir__``.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable, Collection, Mapping
from importlib import import_module
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(
    package: str,
    names: Mapping[str, str],
    namespace: dict[str, Any],
    *,
    over_submodules: Collection[str] = (),
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Return ``__getattr__`` and ``__dir__`` for ``package``, importing each of ``names`` when first used.

    ``dir(package)`` lists the public names (``names`` and the package's ``__all__``) and its
    dunders, not what the package imports for itself (``annotations``, ``TYPE_CHECKING``, …).

    Parameters
    ----------
    package
        The package's name, for the error of a name it does not have.
    names
        Public name → the module that defines it.
    namespace
        The package's ``globals()``: a name once imported is kept there.
    over_submodules
        Public names that are also the names of submodules (``timeline.whatif.replay``, the function,
        in its module ``timeline.whatif.replay``): importing the submodule would bind the package's
        name to the module (the import system sets it on its package); the function stays there.
    """
    if over_submodules:
        _keep_over_submodules(sys.modules[package], frozenset(over_submodules))

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        # the public names and the module's dunders; not what the package imports for itself
        public = namespace.get("__all__", ())
        dunders = {name for name in namespace if name.startswith("__") and name.endswith("__")}
        return sorted(set(names) | set(public) | dunders)

    return __getattr__, __dir__


def _keep_over_submodules(package: types.ModuleType, names: frozenset[str]) -> None:
    """Make ``package`` ignore the import system binding ``names`` to its submodules of those names."""

    class _Package(types.ModuleType):
        def __setattr__(self, name: str, value: Any) -> None:
            if name in names and isinstance(value, types.ModuleType):
                return  # the submodule stays in sys.modules; the package's name is its function
            super().__setattr__(name, value)

    package.__class__ = _Package
