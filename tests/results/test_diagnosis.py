"""The diagnosis as typed data (``build_diagnosis``) and in every renderer: terminal, JSON, markdown, HTML.

On the 2-rank sample, through the library and through ``timeline analyze``: the layout of
``--json``'s ``verdict`` and ``findings`` (and of the diagnosis' own JSON, kind ``diagnosis``),
``--no-findings``, and that each renderer shows the verdict and the findings' numbers as the data
holds them.
"""

from __future__ import annotations

import html
import io
import json

import msgspec
import pytest
from rich.console import Console

from tests.builders import SAMPLES, run_timeline
from timeline.render.html import Result, render_html
from timeline.render.markdown import render_findings_markdown
from timeline.render.terminal.findings import FINDINGS_SHOWN, render_findings
from timeline.results.base import TIMELINE_VERSION
from timeline.results.diagnosis import DIAGNOSIS_VERSION, VERDICT_VERSION, DiagnosisReport, build_diagnosis
from timeline.results.findings import CAUSES, Finding
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
    "ranks",
    "world_size",
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
def diagnosis() -> DiagnosisReport:
    return build_diagnosis(Run(Inputs(paths=[str(SAMPLE)])).diagnosis)


def test_the_layout_of_the_diagnosis(diagnosis: DiagnosisReport) -> None:
    plain = json.loads(msgspec.json.encode(diagnosis))
    assert list(plain) == ["kind", "version", "timeline", "verdict", "findings"]
    assert (plain["kind"], plain["version"], plain["timeline"]) == ("diagnosis", 3, TIMELINE_VERSION)
    assert diagnosis.version == DIAGNOSIS_VERSION == 3  # 2: kind and timeline; 3: the verdict's layout 2
    assert list(plain["verdict"]) == VERDICT_KEYS
    assert plain["verdict"]["version"] == VERDICT_VERSION == 2  # #37: ranks, world_size
    assert diagnosis.findings, "the sample has findings"
    for finding, written in zip(diagnosis.findings, plain["findings"], strict=True):
        assert list(written) == FINDING_KEYS
        assert finding.cause in CAUSES
    top = next(f for f in diagnosis.findings if f.basis != "assumption")
    assert diagnosis.verdict.at_stake_ratio == top.predicted_gain_ratio
    assert (diagnosis.verdict.ranks, diagnosis.verdict.world_size) == ([0, 1], 2)


def test_the_diagnosis_json_decodes_back_into_its_type(diagnosis: DiagnosisReport) -> None:
    encoded = msgspec.json.encode(diagnosis)
    decoded = msgspec.json.decode(encoded, type=DiagnosisReport)
    assert decoded == diagnosis
    assert (decoded.version, decoded.timeline) == (DIAGNOSIS_VERSION, TIMELINE_VERSION)
    assert json.loads(encoded)["kind"] == "diagnosis"


def test_a_finding_of_an_unknown_cause_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown cause 'nonsense'"):
        Finding(cause="nonsense", summary="s", fix="f")
    with pytest.raises(msgspec.ValidationError, match="unknown cause 'nonsense'"):
        msgspec.convert({"cause": "nonsense", "summary": "s", "fix": "f"}, Finding)


def test_analyze_json_holds_the_same_verdict_and_findings(diagnosis: DiagnosisReport) -> None:
    done = run_timeline("analyze", SAMPLE, "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["version"] == 4  # #20 added the dimensions, #36 kind and timeline
    plain = json.loads(msgspec.json.encode(diagnosis))
    assert summary["verdict"] == plain["verdict"]
    assert summary["findings"] == plain["findings"]


def test_no_findings_leaves_them_out() -> None:
    done = run_timeline("analyze", SAMPLE, "--json", "--no-findings")
    summary = json.loads(done.stdout)
    assert summary["verdict"] is None
    assert summary["findings"] is None
    text = run_timeline("analyze", SAMPLE, "--no-findings").stdout
    assert "verdict" not in text
    assert text.startswith("timeline: 2 files")


def test_analyze_prints_the_verdict_and_the_top_findings_before_the_tables(
    diagnosis: DiagnosisReport,
) -> None:
    done = run_timeline("analyze", SAMPLE)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert text.startswith("verdict: ")
    assert text.index("verdict: ") < text.index("Per rank (whole trace)")
    for k, finding in enumerate(diagnosis.findings[:FINDINGS_SHOWN], start=1):
        assert f"{k}. {finding.cause}" in text
        assert f"saves {finding.predicted_gain_ratio:.0%} of the step" in text


def test_the_terminal_renderer_shows_every_finding_up_to_three_and_the_notes(
    diagnosis: DiagnosisReport,
) -> None:
    out = io.StringIO()
    render_findings(diagnosis.verdict, diagnosis.findings, Console(file=out, width=400), verbose=True)
    text = out.getvalue()
    assert " ".join(diagnosis.verdict.summary.split()) in " ".join(text.split())
    for note in diagnosis.verdict.notes:
        assert f"note: {note}" in text
    assert text.count("     fix: ") == min(len(diagnosis.findings), FINDINGS_SHOWN)
    # without --verbose, several notes are one line that counts them
    folded = io.StringIO()
    render_findings(diagnosis.verdict, diagnosis.findings, Console(file=folded, width=400))
    notes = diagnosis.verdict.notes
    if len(notes) > 1:
        assert f"notes: {len(notes)} on " in folded.getvalue()
        assert all(f"note: {note}" not in folded.getvalue() for note in notes)


def test_the_markdown_lists_the_top_findings(diagnosis: DiagnosisReport) -> None:
    lines = render_findings_markdown(diagnosis.verdict, diagnosis.findings)
    rows = [line for line in lines if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == min(3, len(diagnosis.findings))
    assert f"{diagnosis.findings[0].predicted_gain_ratio:.1%}" in rows[0]


def test_the_html_shows_the_verdict_and_a_row_per_finding(diagnosis: DiagnosisReport) -> None:
    page = render_html(diagnosis)
    assert html.escape(diagnosis.verdict.summary) in page
    assert page.count('data-table="findings"') == 1
    body = page.split('data-table="findings"', 1)[1].split("</table>", 1)[0]
    assert body.count("<tr>") == len(diagnosis.findings) + 1  # the header row
    for finding in diagnosis.findings:
        assert f'data-value="{finding.predicted_gain_ratio!r}"' in body
    assert Result(diagnosis).kind == "diagnosis"
    summary = Run(Inputs(paths=[str(SAMPLE)])).summary()
    assert 'data-table="findings"' in summary._repr_html_()
