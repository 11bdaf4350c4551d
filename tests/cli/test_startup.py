"""Start-up: each command imports what it uses (the numbers are in docs/performance.md, not here).

Checked in fresh processes, by module name, never by time: ``timeline --help`` imports neither
polars nor rich nor any library module but the errors; ``timeline analyze`` on a small run imports
neither the budgets, the rank-by-rank machinery nor the report's libraries, and the what-if engine
only when a finding replays (never with ``--no-findings``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.builders import SAMPLES, tiny_kineto

LIST_MODULES = """
import sys
sys.argv = ["timeline", *sys.argv[1:]]
from cli.main import main
try:
    main()
except SystemExit:
    pass
print("\\n".join(sorted(sys.modules)), file=sys.stderr)
"""


def _modules(*args: str) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-c", LIST_MODULES, *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return set(result.stderr.split())


def _under(modules: set[str], *packages: str) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


def test_help_imports_no_library() -> None:
    modules = _modules("--help")
    assert "cli.main" in modules
    assert _under(modules, "polars", "rich", "msgspec", "pydantic", "numpy", "pyarrow") == []
    assert _under(modules, "timeline") == ["timeline", "timeline.errors", "timeline.lazy"]


_NEVER_IN_ANALYZE = (
    "timeline.budgets",
    "timeline.execution.reduce",
    "timeline.execution.graphs",
    "timeline.execution.dataset",
    "timeline.executors",
    "timeline.report",
    "timeline.capture",
    "bokeh",
    "holoviews",
    "ray",
    "pydantic",
    "numpy",
    "pyarrow",
)


def test_analyze_with_findings_imports_the_replay_it_uses_and_nothing_else() -> None:
    modules = _modules("analyze", str(SAMPLES / "ddp_gloo"))
    assert "timeline.diagnosis.diagnosis" in modules  # the findings were made
    assert "timeline.whatif.engine" in modules  # this run's findings replay its graph
    assert _under(modules, *_NEVER_IN_ANALYZE) == []


def test_analyze_imports_no_replay_when_no_finding_needs_one(tmp_path: Path) -> None:
    trace = tmp_path / "rank0.json"
    trace.write_bytes(tiny_kineto(rank=0))  # one kernel: nothing idle, nothing communicated
    modules = _modules("analyze", str(trace))
    assert "timeline.diagnosis.diagnosis" in modules
    assert _under(modules, "timeline.whatif", *_NEVER_IN_ANALYZE) == []


def test_analyze_imports_only_what_it_uses() -> None:
    modules = _modules("analyze", str(SAMPLES / "ddp_gloo"), "--no-findings")
    assert "timeline.analysis.overlap" in modules  # it did run
    assert _under(modules, "timeline.diagnosis") == []
    assert _under(modules, "timeline.whatif", *_NEVER_IN_ANALYZE) == []


@pytest.mark.parametrize(
    "command", ["analyze", "collectives", "whatif", "check", "diff", "report", "convert", "cache"]
)
def test_a_commands_help_imports_no_library(command: str) -> None:
    """``timeline COMMAND --help`` starts as fast as ``timeline --help``: its options need no polars.

    Whether polars is imported before the load changes nothing else (one Kineto decoder, whatever
    was imported: docs/performance.md, "One Kineto decoder").
    """
    modules = _modules(command, "--help")
    assert f"cli.{command}" in modules
    assert _under(modules, "polars", "rich", "msgspec", "numpy", "pyarrow", "bokeh") == []
