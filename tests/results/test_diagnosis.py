"""The diagnosis as data (``build_diagnosis``) and in every renderer: terminal, JSON, markdown, HTML.

On the 2-rank sample, through the library and through ``timeline analyze``: the layout of
``--json``'s ``verdict`` and ``findings``, ``--no-findings``, and that each renderer shows the verdict
and the findings' numbers as the data holds them.
"""

from __future__ import annotations

import html
import io
import json
from typing import Any

import pytest
from rich.console import Console

from tests.builders import SAMPLES, run_timeline
from timeline.render.html import Result, render_html
from timeline.render.markdown import render_findings_markdown
from timeline.render.terminal.findings import FINDINGS_SHOWN, render_findings
from timeline.results.diagnosis import DIAGNOSIS_VERSION, build_diagnosis
from timeline.results.findings import CAUSES
from timeline.run import Inputs, Run

SAMPLE = SAMPLES / "ddp_gloo"
FINDING_KEYS = [
    "cause",
    "summary",
    "ranks",
    "iterations",
    "evidence",
    "fix",
    "predicted_step_ns",
    "predicted_gain_ratio",
    "basis",
]
VERDICT_KEYS = [
    "version",
    "communication_bound",
    "summary",
    "at_stake_ratio",
    "step_ns",
    "iterations",
    "exposed_comm_ratio",
    "model_intensity_ns_per_byte",
    "hide_bandwidth_gbps",
    "link_gbps",
    "replay_error_ratio",
    "examined",
    "notes",
]


@pytest.fixture(scope="module")
def diagnosis() -> dict[str, Any]:
    return build_diagnosis(Run(Inputs(paths=[str(SAMPLE)])).diagnosis)


def test_the_layout_of_the_diagnosis(diagnosis: dict[str, Any]) -> None:
    assert list(diagnosis) == ["version", "verdict", "findings"]
    assert diagnosis["version"] == DIAGNOSIS_VERSION
    assert list(diagnosis["verdict"]) == VERDICT_KEYS
    assert diagnosis["findings"], "the sample has findings"
    for finding in diagnosis["findings"]:
        assert list(finding) == FINDING_KEYS
        assert finding["cause"] in CAUSES
    top = diagnosis["findings"][0]
    assert diagnosis["verdict"]["at_stake_ratio"] == top["predicted_gain_ratio"]
    json.dumps(diagnosis)  # plain data


def test_analyze_json_holds_the_same_verdict_and_findings(diagnosis: dict[str, Any]) -> None:
    done = run_timeline("analyze", SAMPLE, "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["version"] == 3  # #20 added the dimensions
    assert summary["verdict"] == diagnosis["verdict"]
    assert summary["findings"] == diagnosis["findings"]


def test_no_findings_leaves_them_out() -> None:
    done = run_timeline("analyze", SAMPLE, "--json", "--no-findings")
    summary = json.loads(done.stdout)
    assert summary["verdict"] is None
    assert summary["findings"] is None
    text = run_timeline("analyze", SAMPLE, "--no-findings").stdout
    assert "verdict" not in text
    assert text.startswith("timeline: 2 files")


def test_analyze_prints_the_verdict_and_the_top_findings_before_the_tables(diagnosis: dict[str, Any]) -> None:
    done = run_timeline("analyze", SAMPLE)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert text.startswith("verdict: ")
    assert text.index("verdict: ") < text.index("Per rank (whole trace)")
    for k, finding in enumerate(diagnosis["findings"][:FINDINGS_SHOWN], start=1):
        assert f"{k}. {finding['cause']}" in text
        assert f"saves {finding['predicted_gain_ratio']:.0%} of the step" in text


def test_the_terminal_renderer_shows_every_finding_up_to_three_and_the_notes(
    diagnosis: dict[str, Any],
) -> None:
    out = io.StringIO()
    render_findings(diagnosis["verdict"], diagnosis["findings"], Console(file=out, width=400))
    text = out.getvalue()
    assert " ".join(diagnosis["verdict"]["summary"].split()) in " ".join(text.split())
    for note in diagnosis["verdict"]["notes"]:
        assert f"note: {note}" in text
    assert text.count("     fix: ") == min(len(diagnosis["findings"]), FINDINGS_SHOWN)


def test_the_markdown_lists_the_top_findings(diagnosis: dict[str, Any]) -> None:
    lines = render_findings_markdown(diagnosis["verdict"], diagnosis["findings"])
    rows = [line for line in lines if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == min(3, len(diagnosis["findings"]))
    assert f"{diagnosis['findings'][0]['predicted_gain_ratio']:.1%}" in rows[0]


def test_the_html_shows_the_verdict_and_a_row_per_finding(diagnosis: dict[str, Any]) -> None:
    page = render_html(diagnosis)
    assert html.escape(diagnosis["verdict"]["summary"]) in page
    assert page.count('data-table="findings"') == 1
    body = page.split('data-table="findings"', 1)[1].split("</table>", 1)[0]
    assert body.count("<tr>") == len(diagnosis["findings"]) + 1  # the header row
    for finding in diagnosis["findings"]:
        assert f'data-value="{finding["predicted_gain_ratio"]!r}"' in body
    assert Result(diagnosis).kind == "diagnosis"
    summary = Run(Inputs(paths=[str(SAMPLE)])).summary()
    assert 'data-table="findings"' in summary._repr_html_()
