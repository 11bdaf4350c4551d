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
    assert "timeline.whatif.replay" in modules  # this run's findings replay its graph
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


POLARS_AT_LOAD = """
import sys
sys.argv = ["timeline", *sys.argv[1:]]
import timeline.run as run

def load(self, **kwargs):
    print("polars imported at the load:", "polars" in sys.modules, file=sys.stderr)
    raise SystemExit(0)

run.Inputs.load = load
from cli.main import main
try:
    main()
except SystemExit:
    pass
"""


@pytest.mark.parametrize(
    "command",
    [
        ["analyze", "--dimension", "mesh_tp=tp", "--link-gbps", "100"],
        ["collectives", "--dimension", "mesh_tp=tp", "--link-gbps", "100"],
        [
            "whatif",
            "--dimension",
            "mesh_tp=tp",
            "--bandwidth",
            "100",
            "--buckets",
            "ddp:25",
            "--latency",
            "5us",
        ],
        ["check", "--budget", "BUDGET", "--dimension", "mesh_tp=tp", "--link-gbps", "100", "--markdown", "-"],
    ],
    ids=lambda c: c[0],
)
def test_commands_reach_the_load_before_importing_polars(command: list[str], tmp_path: Path) -> None:
    """Parsing the options imports no polars: a large trace is then read in halves with a helper process.

    The helper is started only while polars is not imported yet (:func:`timeline.policy.reads_in_halves`);
    ``--dimension``'s parser once imported polars with the process groups' analysis and so turned the
    reader in halves off for every command; ``timeline whatif`` imported it with the what-if package
    (all of it, from its ``__init__``), ``timeline check`` with the budgets' metrics (their
    expressions).
    """
    trace = tmp_path / "rank0.json"
    trace.write_bytes(tiny_kineto(rank=0))
    budget = tmp_path / "timeline.toml"
    budget.write_text('[[budgets]]\nmetric = "collective_link_utilisation_ratio"\nmin = 0.1\n')
    command = [str(budget) if part == "BUDGET" else part for part in command]
    result = subprocess.run(
        [sys.executable, "-c", POLARS_AT_LOAD, *command, str(trace)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert "polars imported at the load: False" in result.stderr, result.stderr
