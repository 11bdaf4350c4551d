"""docs/ci.md stays true: every metric listed; the example budget file and workflows run as documented."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import xmlschema

from tests.builders import REPO
from timeline.budgets import AGGREGATES, Metric, parse_budgets, registered_metrics
from timeline.errors import BudgetError

CI_DOC = REPO / "docs" / "ci.md"
SAMPLE = REPO / "sample_traces" / "ddp_gloo"
JUNIT_XSD = Path(__file__).parent / "data" / "junit-10.xsd"
BIN = Path(sys.executable).parent

_SAMPLES = {
    "iterations": "rank × iteration",
    "collectives": "communication event",
    "ranks": "rank (whole trace)",
    "logical_collectives": "logical collective (across ranks)",
    "collective_ranks": "rank × logical collective",
    "iteration_utilisation": "iteration (across ranks)",
    "straggler_iterations": "iteration (across ranks)",
    "findings": "cause the diagnosis examined",
}
_SUMMED = {"collectives": "events summed", "collective_ranks": "collectives summed"}


def doc() -> str:
    return CI_DOC.read_text(encoding="utf-8")


def example(marker: str) -> str:
    """Return the fenced block that follows ``<!-- example: MARKER...``."""
    match = re.search(
        rf"<!-- example: {re.escape(marker)}[^\n]*-->\n```\w*\n(.*?)\n```", doc(), flags=re.DOTALL
    )
    assert match is not None, f"docs/ci.md has no example {marker!r}"
    return match.group(1) + "\n"


def metric_row(metric: Metric) -> str:
    if metric.per_iteration:
        samples = f"rank × iteration ({_SUMMED[metric.source]})"
    else:
        samples = _SAMPLES[metric.source]
    return f"| `{metric.name}` | {metric.unit} | {metric.better} | {samples} | {metric.description} |"


def test_every_registered_metric_is_documented() -> None:
    text = doc()
    missing = [metric_row(m) for m in registered_metrics() if metric_row(m) not in text]
    assert not missing, "add these rows to the metric table of docs/ci.md:\n" + "\n".join(missing)
    documented = re.findall(r"^\| `(\w+)` \| [^|]+ \| (?:lower|higher) \|", text, flags=re.MULTILINE)
    assert set(documented) == {m.name for m in registered_metrics()}


def test_budget_keys_and_aggregates_are_documented() -> None:
    text = doc()
    for key in (
        "metric",
        "max",
        "min",
        "aggregate",
        "over",
        "name",
        "skip_iterations",
        "ranks",
        "collective",
        "pg_name",
        "relative",
        "absolute",
    ):
        assert f"| `{key}` |" in text or f"`{key}`," in text, key
    for aggregate in AGGREGATES:
        assert f"`{aggregate}`" in text


def test_example_budget_file_parses() -> None:
    text = example("timeline.toml")
    parsed = parse_budgets(tomllib.loads(text), source="timeline.toml", text=text)
    assert len(parsed.budgets) == 4
    assert len(parsed.regressions) == 2


def test_pyproject_example_parses() -> None:
    block = re.search(r"```toml\n(\[\[tool\.timeline\.budgets\]\].*?)```", doc(), flags=re.DOTALL)
    assert block is not None
    parsed = parse_budgets(tomllib.loads(block.group(1))["tool"]["timeline"], source="pyproject.toml")
    assert parsed.budgets[0].metric.name == "exposed_comm_ratio"


# the documented errors, each with a budget file that produces it
DOCUMENTED_ERRORS = {
    "budgets[2].metric: unknown metric": '[[budgets]]\nmetric = "step_ns"\nmax = 1\n' * 2
    + '[[budgets]]\nmetric = "exposed_comm_ration"\nmax = 0.1\n',
    "budgets[0]: limit is missing": '[[budgets]]\nmetric = "exposed_comm_ratio"\n',
    "budgets[0].max: limit must be a number": '[[budgets]]\nmetric = "exposed_comm_ratio"\nmax = "abc"\n',
    "budgets[0].max: a ratio limit": '[[budgets]]\nmetric = "exposed_comm_ratio"\nmax = 25\n',
    "budgets[1].aggregate": '[[budgets]]\nmetric = "step_ns"\nmax = 1\n'
    '[[budgets]]\nmetric = "step_ns"\nmax = 1\n'
    'aggregate = "median"\n',
    "budgets[0].agregate": '[[budgets]]\nmetric = "step_ns"\nmax = 1\nagregate = "p90"\n',
    "regression.step_ns: tolerance": "[regression]\nstep_ns = {}\n",
    "3:13: not valid TOML": '[[budgets]]\nmetric = "step_ns"\naggregate = p90\nmax = 1\n',  # unquoted
    "link_gbps: 'fast'": 'link_gbps = "fast"\n[[budgets]]\nmetric = "step_ns"\nmax = 1\n',
    "budgets[0].over: collective_start_skew_ns": '[[budgets]]\nmetric = "collective_start_skew_ns"\n'
    'max = 1\nover = "rank"\n',
}


def test_documented_errors_are_the_real_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from timeline.budgets import read_budget_file

    lines = [line for line in doc().splitlines() if line.startswith("error: timeline.toml:")]
    assert len(lines) == len(DOCUMENTED_ERRORS)
    monkeypatch.chdir(tmp_path)
    for line in lines:
        (key,) = [k for k in DOCUMENTED_ERRORS if line.startswith(f"error: timeline.toml:{k}")]
        Path("timeline.toml").write_text(DOCUMENTED_ERRORS[key], encoding="utf-8")
        with pytest.raises(BudgetError) as info:
            read_budget_file("timeline.toml")
        assert f"error: {info.value}" == line


def commands(block: str) -> list[str]:
    """Return the ``timeline ...`` command lines of a YAML or shell block."""
    out = []
    for raw in block.splitlines():
        line = raw.strip()
        for prefix in ("- ", "run: "):
            line = line.removeprefix(prefix)
        if line.startswith("timeline "):
            out.append(line)
    return out


def run_shell(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.parametrize("workflow", ["GitHub Actions", "GitLab CI"])
def test_example_workflow_runs_on_the_sample_traces(tmp_path: Path, workflow: str) -> None:
    assert (BIN / "timeline").exists(), "the timeline console script is installed beside the interpreter"
    env = {
        **os.environ,
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "TRACES": str(SAMPLE),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "step-summary.md"),
    }
    (tmp_path / "timeline.toml").write_text(example("timeline.toml"), encoding="utf-8")
    (tmp_path / "ci").mkdir()
    (refresh,) = commands(example("refresh the baseline"))
    result = run_shell(refresh, tmp_path, env)
    assert result.returncode == 0, result.stderr
    checks = commands(example(workflow))
    assert len(checks) == 1
    assert checks[0].startswith('timeline check "$TRACES" --baseline ci/timeline-baseline.json --junit ')
    result = run_shell(checks[0], tmp_path, env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("timeline check: 6 checks, all hold")
    xmlschema.XMLSchema(JUNIT_XSD).validate(tmp_path / "timeline-junit.xml")
    summary = tmp_path / ("step-summary.md" if workflow == "GitHub Actions" else "timeline-check.md")
    assert summary.read_text(encoding="utf-8").startswith("### ✅ timeline check: 6 checks, all hold")
    if workflow == "GitHub Actions":
        assert result.stdout.endswith("::notice title=timeline check::6 checks, all hold\n")


def test_cli_reference_has_the_check_section() -> None:
    text = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    assert "## `timeline check`" in text
    for option in ("--budget", "--baseline", "--json", "--junit", "--github", "--markdown", "--link-gbps"):
        assert option in text.split("## `timeline check`", 1)[1], option
