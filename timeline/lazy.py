"""Names of a package imported on first use (PEP 562), so that importing the package costs nothing.

``timeline`` and ``timeline.execution`` list their public names with the module each lives in;
:func:`lazy_names` gives the package's ``__getattr__`` and ``__dir__``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(
    package: str, names: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Return ``__getattr__`` and ``__dir__`` for ``package``, importing each of ``names`` when first used.

    Parameters
    ----------
    package
        The package's name, for the error of a name it does not have.
    names
        Public name → the module that defines it.
    namespace
        The package's ``globals()``: a name once imported is kept there.
    """

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__
