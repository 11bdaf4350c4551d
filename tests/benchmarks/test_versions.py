"""The versions the benchmarks record beside their numbers (benchmarks/quiet.py)."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

from benchmarks.quiet import TIMELINE_DISTRIBUTION, package_version, versions

ROOT = Path(__file__).resolve().parents[2]


def test_timeline_is_found_under_its_distribution_name() -> None:
    # "timeline" on PyPI is another project: the reports once said "timeline not installed"
    name = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
    assert name == TIMELINE_DISTRIBUTION
    assert package_version("timeline") == metadata.version(name)
    assert package_version("timeline") != "not installed"


def test_versions_line_names_each_distribution() -> None:
    assert versions("timeline", "polars") == (
        f"timeline {metadata.version(TIMELINE_DISTRIBUTION)}, polars {metadata.version('polars')}"
    )
    assert versions("no-such-distribution-here") == "no-such-distribution-here not installed"
