"""``timeline check`` through the real console script: exit codes, outputs, budget-file errors, startup."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import msgspec
import pytest
import xmlschema

from tests.budgets.runs import write_run
from tests.builders import REPO

SAMPLE = REPO / "sample_traces" / "ddp_gloo"
JUNIT_XSD = Path(__file__).parent / "data" / "junit-10.xsd"
_SCRIPT = Path(sys.executable).parent / "timeline"
COMMAND = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-c", "from cli.main import main; main()"]

LENIENT = """\
[[budgets]]
name = "exposed comm per step"
metric = "exposed_comm_ratio"
aggregate = "p90"
max = 0.9

[[budgets]]
metric = "step_ns"
over = "rank"
max = 10_000_000_000
"""

TIGHT = """\
[[budgets]]
name = "exposed comm per step"
metric = "exposed_comm_ratio"
max = 0.01
"""


def timeline(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [*COMMAND, *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_pass_exits_0(tmp_path: Path) -> None:
    write(tmp_path / "timeline.toml", LENIENT)
    result = timeline("check", SAMPLE, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0] == "timeline check: 2 checks, all hold"
    assert lines[2].startswith("PASS    exposed comm per step")
    assert lines[-1] == f"budgets: timeline.toml; run: {SAMPLE}"


def test_fail_exits_1(tmp_path: Path) -> None:
    write(tmp_path / "timeline.toml", TIGHT)
    result = timeline("check", SAMPLE, cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr == ""
    assert result.stdout.splitlines()[0] == "timeline check: 1 check: 1 failed"
    # 45.28% since #20 (calls into c10d are not compute: tests/analysis/test_sample_compute.py)
    assert (
        "FAIL exposed comm per step: exposed_comm_ratio max = 45.28% > max 1.00%; worst sample rank 1, "
        "iteration 4: 45.28%" in result.stdout
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            '[[budgets]]\nmetric = "exposed_comm_ration"\nmax = 0.25\n',
            "timeline.toml:budgets[0].metric: unknown metric 'exposed_comm_ration'; "
            "did you mean 'exposed_comm_ratio'?",
            id="unknown-metric",
        ),
        pytest.param(
            '[[budgets]]\nmetric = "step_ns"\nmax = "abc"\n',
            "timeline.toml:budgets[0].max: limit must be a number, got 'abc'",
            id="wrong-type",
        ),
        pytest.param(
            '[[budgets]]\nmetric = "step_ns"\n',
            "timeline.toml:budgets[0]: limit is missing; set max = ... (an upper limit) or min = ... "
            "(a lower limit), in ns",
            id="missing-limit",
        ),
        pytest.param(
            '[[budgets]]\nmetric = "step_ns"\nmax = 1\naggregate = "p1000"\n',
            "timeline.toml:budgets[0].aggregate: unknown aggregate 'p1000'; did you mean 'p90'? use one of "
            "max, min, mean, p50, p90, p99 or any pNN",
            id="bad-aggregate",
        ),
        pytest.param(
            "[[budgets]\n",
            "timeline.toml:1:10: not valid TOML: expected ']]' at the end of an array declaration",
            id="not-toml",
        ),
        pytest.param(
            '[[budgets]]\nmetric = "step_ns"\nmaxx = 1\n',
            "timeline.toml:budgets[0].maxx: unknown key; did you mean 'max'?",
            id="unknown-key",
        ),
        pytest.param(
            "[regression]\nstep_ns = {}\n",
            "timeline.toml:regression.step_ns: tolerance is missing; set relative = 0.10 (10 % of the "
            "baseline) or absolute = ... (in ns)",
            id="missing-tolerance",
        ),
    ],
)
def test_budget_file_errors_exit_2(tmp_path: Path, text: str, message: str) -> None:
    write(tmp_path / "timeline.toml", text)
    result = timeline("check", SAMPLE, "--budget", "timeline.toml", cwd=tmp_path)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", f"error: {message}\n")


def test_no_budgets_exits_2(tmp_path: Path) -> None:
    result = timeline("check", SAMPLE, cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == "error: no budgets: pass --budget FILE or add timeline.toml (see docs/ci.md)\n"


def test_budgets_from_pyproject(tmp_path: Path) -> None:
    write(
        tmp_path / "pyproject.toml",
        '[project]\nname = "job"\n\n' + TIGHT.replace("[[budgets]]", "[[tool.timeline.budgets]]"),
    )
    result = timeline("check", SAMPLE, "--github", cwd=tmp_path)
    assert result.returncode == 1
    assert "::error file=" in result.stdout
    assert (
        "::error file=pyproject.toml,line=4,title=timeline check%3A exposed comm per step (FAIL)::"
        in result.stdout
    )


def test_bad_trace_exits_2(tmp_path: Path) -> None:
    write(tmp_path / "timeline.toml", LENIENT)
    result = timeline("check", tmp_path / "missing", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith("error: ")
    assert result.stderr.count("\n") == 1


def test_summary_baseline_round_trip(tmp_path: Path) -> None:
    analyze = timeline("analyze", SAMPLE, "--json", cwd=tmp_path)
    assert analyze.returncode == 0
    (tmp_path / "base.json").write_text(analyze.stdout)
    write(
        tmp_path / "timeline.toml",
        LENIENT + "\n[regression]\nexposed_comm_ratio = { relative = 0.1 }\n"
        "step_ns = { absolute = 0, over = 'rank' }\n",
    )
    result = timeline("check", SAMPLE, "--baseline", "base.json", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stdout
    report = msgspec.json.decode(result.stdout)
    assert report["baseline"] == "base.json"
    regressions = [v for v in report["verdicts"] if v["kind"] == "regression"]
    assert [(v["status"], v["value"] == v["baseline"]) for v in regressions] == [
        ("pass", True),
        ("pass", True),
    ]
    assert regressions[0]["message"].endswith(": no change")


def test_baseline_without_regression_entries_warns(tmp_path: Path) -> None:
    write(tmp_path / "timeline.toml", LENIENT)
    result = timeline("check", SAMPLE, "--baseline", tmp_path / "not-read.json", cwd=tmp_path)
    assert result.returncode == 0
    assert result.stderr == "warning: timeline.toml has no [regression] entries; --baseline is not used\n"


def test_collective_metric_needs_the_trace_not_a_summary(tmp_path: Path) -> None:
    analyze = timeline("analyze", SAMPLE, "--json", cwd=tmp_path)
    (tmp_path / "base.json").write_text(analyze.stdout)
    write(tmp_path / "timeline.toml", "[regression]\ncollective_exposed_ns = { relative = 0.1 }\n")
    result = timeline("check", SAMPLE, "--baseline", "base.json", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "error: timeline.toml:regression.collective_exposed_ns: collective_exposed_ns needs "
        "per-collective rows, "
        "which a summary JSON (base.json) does not keep; pass the trace or its Parquet file instead\n"
    )
    # the trace itself works as a baseline
    assert timeline("check", SAMPLE, "--baseline", SAMPLE, cwd=tmp_path).returncode == 0


NOISY_BASELINE = {0: [50, 250] * 4, 1: [250, 50] * 4}  # mean 150 ns, standard error ≈ 26 ns


@pytest.mark.parametrize(
    ("new", "code", "verdict"),
    [
        pytest.param({0: [80, 280] * 4, 1: [280, 80] * 4}, 0, "PASS", id="within-noise"),
        pytest.param({0: [200, 390] * 4, 1: [390, 200] * 4}, 1, "FAIL", id="beyond-noise"),
    ],
)
def test_regression_against_noise(tmp_path: Path, new: dict[int, list[int]], code: int, verdict: str) -> None:
    write_run(tmp_path / "old.parquet", NOISY_BASELINE)
    write_run(tmp_path / "new.parquet", new)
    write(tmp_path / "timeline.toml", "[regression]\nexposed_comm_ns = { relative = 0.10 }\n")
    result = timeline("check", "new.parquet", "--baseline", "old.parquet", cwd=tmp_path)
    assert result.returncode == code, result.stdout + result.stderr
    row = result.stdout.splitlines()[2]
    assert row.startswith(verdict)
    assert "exposed_comm_ns mean vs baseline" in row
    note = "within the noise" if code == 0 else "more than the tolerance 15 ns and the noise"
    assert note in result.stdout


def test_ci_outputs(tmp_path: Path) -> None:
    write(tmp_path / "timeline.toml", TIGHT + LENIENT)
    result = timeline(
        "check", SAMPLE, "--junit", "out/junit.xml", "--markdown", "check.md", "--github", cwd=tmp_path
    )
    assert result.returncode == 2  # out/ does not exist
    assert result.stderr == "error: out/junit.xml: cannot write (No such file or directory)\n"
    result = timeline(
        "check", SAMPLE, "--junit", "junit.xml", "--markdown", "check.md", "--github", cwd=tmp_path
    )
    assert result.returncode == 1
    xmlschema.XMLSchema(JUNIT_XSD).validate(tmp_path / "junit.xml")
    markdown = (tmp_path / "check.md").read_text(encoding="utf-8")
    assert markdown.startswith("### ❌ timeline check: 3 checks: 1 failed\n")
    lines = result.stdout.splitlines()
    assert lines[0] == "timeline check: 3 checks: 1 failed"
    assert lines[-1] == (
        "::error file=timeline.toml,line=1,title=timeline check%3A exposed comm per step (FAIL)::"
        "exposed_comm_ratio max = 45.28%25 > max 1.00%25; worst sample rank 1, iteration 4: 45.28%25"
    )


def test_json_and_markdown_on_stdout(tmp_path: Path) -> None:
    write(tmp_path / "timeline.toml", TIGHT)
    result = timeline("check", SAMPLE, "--json", cwd=tmp_path)
    assert result.returncode == 1
    data = msgspec.json.decode(result.stdout)
    assert (data["ok"], data["exit_code"], data["counts"]["fail"]) == (False, 1, 1)
    # the JSON is the typed result: it decodes back into CheckReport, kind, layout and version first
    from timeline.results.base import TIMELINE_VERSION
    from timeline.results.verdicts import CheckReport

    assert result.stdout.startswith(f'{{"kind":"check","version":2,"timeline":"{TIMELINE_VERSION}",')
    report = msgspec.json.decode(result.stdout, type=CheckReport)
    assert (report.version, report.timeline, report.ok, report.counts.fail) == (2, TIMELINE_VERSION, False, 1)
    assert [v.name for v in report.verdicts] == ["exposed comm per step"]
    markdown = timeline("check", SAMPLE, "--markdown", "-", cwd=tmp_path)
    assert markdown.returncode == 1
    assert markdown.stdout.startswith("### ❌ timeline check: 1 check: 1 failed\n\n| | check |")
    both = timeline("check", SAMPLE, "--json", "--github", cwd=tmp_path)
    assert (both.returncode, both.stdout) == (2, "")
    assert (
        both.stderr
        == "error: --json prints JSON on stdout; it cannot be combined with --github or --markdown -\n"
    )


BLOCK_HEAVY_IMPORTS = """
import sys

class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("bokeh", "holoviews"):
            raise ImportError(f"timeline check imported {name}")
        return None

sys.meta_path.insert(0, Blocker())
sys.argv = ["timeline", *sys.argv[1:]]
from cli.main import main
try:
    main()
finally:
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("bokeh", "holoviews"))
    print("heavy modules:", heavy, file=sys.stderr)
"""


def test_check_never_imports_bokeh_or_holoviews(tmp_path: Path) -> None:
    write(tmp_path / "timeline.toml", LENIENT)
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            BLOCK_HEAVY_IMPORTS,
            "check",
            str(SAMPLE),
            "--junit",
            "j.xml",
            "--markdown",
            "m.md",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == "heavy modules: []\n"
