"""The what-if package's public names: imported when first used, each the object its module defines."""

from __future__ import annotations

import subprocess
import sys


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
