"""The what-if package's public names: imported when first used, each the object its module defines."""

from __future__ import annotations

import subprocess
import sys

import pytest

import timeline.whatif

SHADOWED = """
import sys, types
import timeline.whatif.replay, timeline.whatif.sweep  # the submodules first, as the diagnosis does
from timeline.whatif import replay, sweep
import timeline.whatif as package
assert not isinstance(replay, types.ModuleType) and replay is sys.modules["timeline.whatif.replay"].replay
assert not isinstance(sweep, types.ModuleType) and sweep is sys.modules["timeline.whatif.sweep"].sweep
assert package.replay is replay and package.sweep is sweep
print("ok")
"""


@pytest.mark.parametrize("name", timeline.whatif.__all__)
def test_each_public_name_is_its_modules_object(name: str) -> None:
    value = getattr(timeline.whatif, name)
    module = sys.modules[timeline.whatif._LAZY[name]]
    assert value is getattr(module, name)


def test_the_functions_named_as_their_modules_stay_functions_after_the_modules_are_imported() -> None:
    """``replay`` and ``sweep`` are functions of the package and modules of the same names.

    The import system binds the package's name to a submodule when the submodule is imported; the
    package keeps the function (as its eager ``__init__`` did).
    """
    result = subprocess.run(
        [sys.executable, "-c", SHADOWED], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.stdout.strip() == "ok", result.stderr


def test_importing_the_package_imports_neither_polars_nor_its_modules() -> None:
    code = (
        "import sys, timeline.whatif.settings, timeline.whatif.seed; "
        "print(sorted(m for m in sys.modules if m == 'polars' or m.startswith('timeline.whatif.')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    # the option parsers and the seed paper's reader need the bucketing, compression and cost models only
    assert result.stdout.strip() == str(
        [
            "timeline.whatif.bucketing",
            "timeline.whatif.compression",
            "timeline.whatif.costs",
            "timeline.whatif.seed",
            "timeline.whatif.settings",
        ]
    )


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'replay_all'"):
        _ = timeline.whatif.replay_all
