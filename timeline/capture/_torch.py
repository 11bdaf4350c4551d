"""Import torch on demand, the one place :mod:`timeline.capture` does it.

Nothing else in ``timeline`` imports torch: analysis never needs it. The module object is returned
typed as :class:`types.ModuleType`, so attribute access is dynamic and type checking does not
depend on which torch (if any) is installed.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import warnings
from types import ModuleType

from timeline.errors import TimelineError

__all__ = ["TORCH_MISSING_MESSAGE", "TorchMissingError", "import_torch", "require_torch"]

TORCH_MISSING_MESSAGE = "timeline capture needs torch: pip install 'timeline-comm[torch]'"


class TorchMissingError(TimelineError, ImportError):
    """Capturing was asked for but torch is not installed."""


def require_torch() -> None:
    """Raise :class:`TorchMissingError` when torch cannot be imported, without importing it.

    Raises
    ------
    TorchMissingError
        torch is not installed.
    """
    if importlib.util.find_spec("torch") is None:
        raise TorchMissingError(TORCH_MISSING_MESSAGE)


def import_torch() -> ModuleType:
    """Return the ``torch`` module, importing it on first use.

    The CPU wheels of torch warn ``Failed to initialize NumPy`` at import when numpy is absent;
    capturing never needs numpy, so that one warning is silenced.

    Returns
    -------
    types.ModuleType
        ``torch``.

    Raises
    ------
    TorchMissingError
        torch is not installed.
    """
    loaded = sys.modules.get("torch")
    if loaded is not None:
        return loaded
    require_torch()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)
        try:
            return importlib.import_module("torch")
        except ModuleNotFoundError as exc:
            if exc.name != "torch":
                raise
            raise TorchMissingError(TORCH_MISSING_MESSAGE) from exc
