"""``timeline check --baseline`` of another job (issue #19): the check says so, in every output.

Another job: another world size, communication backend, device mode (GPU kernels vs CPU only) or
collective mix. Its regression checks still run (the exit code is the verdicts'), with a warning in
the table, the markdown, the JUnit XML (a suite property, valid against the Jenkins schema), the
GitHub annotations and the JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import msgspec
import polars as pl
import pytest
import xmlschema

from tests.budgets.runs import run_events
from tests.builders import PARAM, REPO, TRACES, cpu, frames_of, make_events, run_timeline, step
from timeline.budgets import CheckReport, MetricFrames, evaluate_budgets, parse_budgets
from timeline.render.github import render_github
from timeline.render.junit import render_junit
from timeline.render.markdown import render_markdown
from timeline.render.terminal.verdicts import render_table
from timeline.results.base import encode
from timeline.schema import FILES_SCHEMA

JUNIT_XSD = Path(__file__).parent / "data" / "junit-10.xsd"
GLOO = REPO / "sample_traces" / "ddp_gloo"

BUDGETS = """\
[[budgets]]
metric = "step_ns"
max = 1e12

[regression]
exposed_comm_ratio = { relative = 0.5 }
"""

ANOTHER_JOB = (
    "the baseline looks like another job: world size 8 vs 2 in the baseline; backend nccl vs gloo; "
    "device mode GPU kernels vs CPU only; its regression checks compare different runs"
)


def files(ranks: int, backend: str) -> pl.DataFrame:
    """A file table of ``ranks`` Kineto files of a ``ranks``-rank job on ``backend``."""
    return pl.DataFrame(
        [
            {"rank": r, "path": f"rank{r}.json", "format": "kineto", "rank_from": "distributedInfo",
             "world_size": ranks, "backend": backend, "host": "h", "clock": "epoch", "events": 1}
            for r in range(ranks)
        ],
        schema=FILES_SCHEMA,
    )  # fmt: skip


def gpu_run(*, collective: str = "all_reduce", label: str = "runs/pr") -> MetricFrames:
    """8 GPU ranks on NCCL, 2 iterations each."""
    events = run_events({r: [100, 150] for r in range(8)}, collective=collective)
    return frames_of(events, label=label, files=files(8, "nccl"))


def cpu_run(label: str = "runs/base") -> MetricFrames:
    """2 CPU-only ranks on gloo: CPU operators and a gloo all-reduce per 1000 ns iteration."""
    rows: list[dict[str, Any]] = []
    for rank in (0, 1):
        for k in range(2):
            t = 1_000 * k
            rows += [
                step(k, t, t + 1_000, rank=rank),
                cpu("cpu_op", t + 10, t + 600, rank=rank, name="aten::mm"),
                cpu("communication", t + 500, t + 700, rank=rank, tid=2, name="gloo:all_reduce",
                    collective="all_reduce", cat="user_annotation"),
            ]  # fmt: skip
    return frames_of(make_events(rows), label=label, files=files(2, "gloo"))


def check(run: MetricFrames, baseline: MetricFrames) -> CheckReport:
    budgets = parse_budgets(tomllib.loads(BUDGETS), source="timeline.toml", text=BUDGETS)
    return evaluate_budgets(budgets, run, baseline=baseline)


def test_a_gpu_nccl_run_against_a_cpu_gloo_baseline_is_another_job() -> None:
    assert cpu_run().ranks["mode"].to_list() == ["cpu", "cpu"]
    report = check(gpu_run(), cpu_run())
    assert report.warnings == [ANOTHER_JOB]
    regression = report.verdicts[1]
    assert (regression.kind, regression.status != "skip") == ("regression", True)  # still checked
    assert regression.baseline is not None


def test_another_collective_mix_is_another_job() -> None:
    report = check(gpu_run(collective="all_to_all"), gpu_run(label="runs/base"))
    assert report.warnings == [
        "the baseline looks like another job: collectives all_to_all vs all_reduce; its regression checks "
        "compare different runs",
    ]


def test_the_same_job_gives_no_warning() -> None:
    report = check(gpu_run(), gpu_run(label="runs/base"))
    assert report.warnings == []
    assert "warning" not in render_table(report)
    assert msgspec.json.decode(encode(report), type=CheckReport).warnings == []


def test_every_output_says_so(tmp_path: Path) -> None:
    report = check(gpu_run(), cpu_run())
    table = render_table(report).splitlines()
    assert f"warning: {ANOTHER_JOB}" in table
    assert table.index(f"warning: {ANOTHER_JOB}") < table.index("budgets: timeline.toml; run: runs/pr; "
                                                                 "baseline: runs/base")  # fmt: skip
    assert f"> ⚠️ **warning**: {ANOTHER_JOB}" in render_markdown(report).splitlines()
    assert f"::warning title=timeline check::{ANOTHER_JOB}" in render_github(report).splitlines()
    assert msgspec.json.decode(encode(report), type=CheckReport).warnings == [ANOTHER_JOB]
    junit = tmp_path / "junit.xml"
    junit.write_text(render_junit(report), encoding="utf-8")
    xmlschema.XMLSchema(JUNIT_XSD).validate(junit)
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    properties = [(p.get("name"), p.get("value")) for p in suite.iter("property")]
    assert ("warning", ANOTHER_JOB) in properties
    out = suite.find("system-out")
    assert out is not None
    assert out.text is not None
    assert f"warning: {ANOTHER_JOB}" in out.text


def timeline(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "timeline"
    command = (
        [str(script)] if script.exists() else [sys.executable, "-c", "from cli.main import main; main()"]
    )
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [*command, *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )


def test_check_an_8_rank_nccl_run_against_a_2_rank_gloo_run(tmp_path: Path) -> None:
    (tmp_path / "timeline.toml").write_text(BUDGETS, encoding="utf-8")
    result = timeline(
        "check", PARAM, "--baseline", GLOO, "--junit", "j.xml", "--markdown", "m.md", cwd=tmp_path
    )
    assert result.returncode in (0, 1), result.stderr  # the verdicts decide, not the warning
    warning = (
        "warning: the baseline looks like another job: world size 8 vs 2 in the baseline; backend nccl vs "
        "gloo; device mode GPU kernels vs CPU only; collectives all_reduce + all_to_all vs all_reduce; its "
        "regression checks compare different runs"
    )
    # one paragraph of the table's output, wrapped at the width with a hanging indent
    assert warning in " ".join(result.stdout.split())
    assert warning.removeprefix("warning: ") in (tmp_path / "m.md").read_text(encoding="utf-8")
    xmlschema.XMLSchema(JUNIT_XSD).validate(tmp_path / "j.xml")
    assert 'name="warning"' in (tmp_path / "j.xml").read_text(encoding="utf-8")


def test_a_summary_baseline_is_compared_without_its_collective_mix(tmp_path: Path) -> None:
    (tmp_path / "timeline.toml").write_text(BUDGETS, encoding="utf-8")
    summary = timeline("analyze", GLOO, "--json", cwd=tmp_path)
    assert summary.returncode == 0, summary.stderr
    (tmp_path / "base.json").write_text(summary.stdout, encoding="utf-8")
    result = timeline("check", PARAM, "--baseline", "base.json", "--json", cwd=tmp_path)
    assert result.returncode in (0, 1), result.stderr
    assert msgspec.json.decode(result.stdout)["warnings"] == [ANOTHER_JOB]
    same = timeline("check", GLOO, "--baseline", "base.json", "--json", cwd=tmp_path)
    assert msgspec.json.decode(same.stdout)["warnings"] == []


def test_github_annotation_on_the_command_line(tmp_path: Path) -> None:
    (tmp_path / "timeline.toml").write_text(BUDGETS, encoding="utf-8")
    result = timeline("check", PARAM, "--baseline", GLOO, "--github", cwd=tmp_path)
    assert any(
        line.startswith("::warning title=timeline check::the baseline looks like another job")
        for line in result.stdout.splitlines()
    )


def test_busbw_budgets_of_a_partial_run_use_the_job_world_size(tmp_path: Path) -> None:
    """One traced rank of an 8-rank job: busbw from the job's world size, as `collectives` gives it.

    Before, `check` matched without the world size: busbw 0.
    """
    trace = TRACES / "kineto" / "hta_trace_diff" / "control.json.gz"
    collectives = run_timeline("collectives", trace, "--json")
    assert collectives.returncode == 0, collectives.stderr
    largest = max(
        c["busbw_gbps"] for c in json.loads(collectives.stdout)["collectives"] if not c["implausible"]
    )
    assert largest > 0
    budget = tmp_path / "budget.toml"
    budget.write_text('[[budgets]]\nmetric = "collective_busbw_gbps"\naggregate = "max"\nmin = 0\n')
    result = run_timeline("check", trace, "--budget", budget, "--json")
    assert result.returncode == 0, result.stderr
    [verdict] = json.loads(result.stdout)["verdicts"]
    assert verdict["value"] == pytest.approx(largest)
