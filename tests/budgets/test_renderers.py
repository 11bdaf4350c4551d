"""Verdicts rendered: the table, JSON, JUnit XML (against the Jenkins schema), annotations, markdown."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import msgspec
import pytest
import xmlschema

from tests.budgets.runs import run_frames
from timeline.budgets import CheckReport, evaluate_budgets, parse_budgets
from timeline.render.github import render_github
from timeline.render.json import render_json as render_data
from timeline.render.junit import render_junit
from timeline.render.markdown import render_markdown
from timeline.render.terminal.verdicts import render_table
from timeline.results.base import TIMELINE_VERSION
from timeline.results.verdicts import CHECK_VERSION


def render_json(report: CheckReport) -> str:
    """``timeline check --json``: the verdicts as JSON."""
    return render_data(report)


JUNIT_XSD = Path(__file__).parent / "data" / "junit-10.xsd"

BUDGETS = """\
[[budgets]]
name = "exposed comm per step"
metric = "exposed_comm_ratio"
aggregate = "p90"
max = 0.25

[[budgets]]
name = "step, 100% of it: ok"
metric = "exposed_comm_ns"
over = "rank"
max = 200

[[budgets]]
name = "rank 9 <missing> & \\"quoted\\""
metric = "step_ns"
ranks = [9]
max = 1

[regression]
step_ns = { relative = 0.1 }
"""


def make_report(*, baseline: bool = False, text: str = BUDGETS) -> CheckReport:
    import tomllib

    parsed = parse_budgets(tomllib.loads(text), source="timeline.toml", text=text)
    run = run_frames({0: [100, 120, 140], 1: [390, 60, 80]}, label="runs/pr")
    return evaluate_budgets(
        parsed,
        run,
        baseline=run_frames({0: [100] * 3, 1: [100] * 3}, label="base.json") if baseline else None,
    )


@pytest.fixture(scope="module")
def report() -> CheckReport:
    return make_report()


def test_statuses(report: CheckReport) -> None:
    assert [v.status for v in report.verdicts] == ["fail", "fail", "nodata", "skip"]
    assert report.exit_code == 1


def test_table(report: CheckReport) -> None:
    table = render_table(report)
    lines = table.splitlines()
    assert lines[0] == "timeline check: 4 checks: 2 failed, 1 without data"
    assert lines[1].split() == [
        "STATUS",
        "CHECK",
        "METRIC",
        "VALUE",
        "LIMIT",
        "WORST",
        "(rank,",
        "iteration)",
    ]
    assert lines[2].split("  ")[0] == "FAIL"
    assert "exposed comm per step" in lines[2]
    assert "exposed_comm_ratio p90" in lines[2]
    assert "<= 25.00%" in lines[2]
    assert "rank 1, iteration 0: 39.00%" in lines[2]
    assert "exposed_comm_ns max per rank" in lines[3]
    assert lines[4].startswith("NO DATA")
    assert lines[5].startswith("SKIP")
    assert (
        "FAIL step, 100% of it: ok: exposed_comm_ns max of rank 1 (the worst rank) = 390 ns > max 200 ns; "
        "worst sample rank 1, iteration 0: 390 ns" in lines
    )
    assert lines[-1] == "budgets: timeline.toml; run: runs/pr"
    passing = render_table(make_report(text='[[budgets]]\nmetric = "step_ns"\nmax = 1000\n'))
    assert passing.splitlines()[0] == "timeline check: 1 check, all hold"


def test_json(report: CheckReport) -> None:
    data = msgspec.json.decode(render_json(report))
    # layout 2: kind and timeline's version first, noise_k last; layout 1's keys in their order between
    assert list(data) == [
        "kind",
        "version",
        "timeline",
        "ok",
        "exit_code",
        "budget_file",
        "inputs",
        "baseline",
        "counts",
        "verdicts",
        "warnings",
        "noise_k",
    ]
    assert (data["kind"], data["timeline"], data["noise_k"]) == ("check", TIMELINE_VERSION, 3.0)
    assert (
        data["version"],
        data["ok"],
        data["exit_code"],
        data["budget_file"],
        data["inputs"],
        data["baseline"],
    ) == (
        2,
        False,
        1,
        "timeline.toml",
        "runs/pr",
        None,
    )
    assert data["counts"] == {"pass": 0, "fail": 2, "nodata": 1, "skip": 1}
    first = data["verdicts"][0]
    assert first == {
        "kind": "budget",
        "name": "exposed comm per step",
        "status": "fail",
        "metric": "exposed_comm_ratio",
        "unit": "ratio",
        "aggregate": "p90",
        "over": "all",
        "value": pytest.approx(0.265),
        "max": 0.25,
        "min": None,
        "samples": 6,
        "worst": {"rank": 1, "iteration": 0, "collective": None, "value": 0.39},
        "baseline": None,
        "tolerance": None,
        "noise": None,
        "link_gbps": None,
        "message": first["message"],
        "where": "timeline.toml:budgets[0]",
        "line": 1,
    }
    assert list(first) == [
        "kind",
        "name",
        "status",
        "metric",
        "unit",
        "aggregate",
        "over",
        "value",
        "max",
        "min",
        "samples",
        "worst",
        "baseline",
        "tolerance",
        "noise",
        "link_gbps",
        "message",
        "where",
        "line",
    ]
    regression = msgspec.json.decode(render_json(make_report(baseline=True)))["verdicts"][3]
    assert (regression["kind"], regression["status"], regression["baseline"], regression["tolerance"]) == (
        "regression",
        "pass",
        1000.0,
        100.0,
    )


def test_json_decodes_back_into_the_type(report: CheckReport) -> None:
    for each in (report, make_report(baseline=True)):
        decoded = msgspec.json.decode(render_json(each), type=CheckReport)
        assert decoded == each
        assert (decoded.version, decoded.timeline) == (CHECK_VERSION, TIMELINE_VERSION) == (2, "0.1.0")
        assert msgspec.json.decode(render_json(each))["kind"] == "check"


def test_junit_validates_against_the_schema(tmp_path: Path, report: CheckReport) -> None:
    schema = xmlschema.XMLSchema(JUNIT_XSD)
    for each in (
        report,
        make_report(baseline=True),
        make_report(text='[[budgets]]\nmetric = "step_ns"\nmax = 1e4\n'),
    ):
        path = tmp_path / "junit.xml"
        path.write_text(render_junit(each), encoding="utf-8")
        schema.validate(path)


def test_junit_content(report: CheckReport) -> None:
    root = ET.fromstring(render_junit(report))
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("4", "2", "1")
    suite = root.find("testsuite")
    assert suite is not None
    assert suite.get("skipped") == "1"
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [
        "exposed comm per step",
        "step, 100% of it: ok",
        'rank 9 <missing> & "quoted"',
        "step_ns mean vs baseline",
    ]
    assert [c.get("classname") for c in cases] == ["timeline.budget"] * 3 + ["timeline.regression"]
    failure = cases[0].find("failure")
    assert failure is not None
    assert failure.get("message") == report.verdicts[0].message
    assert failure.text is not None
    assert "limit: <= 25.00%" in failure.text
    error = cases[2].find("error")
    assert error is not None
    assert error.get("message") == "no data: no rank 9 in runs/pr (ranks 0, 1)"
    assert cases[3].find("skipped") is not None
    properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert properties == {"budget_file": "timeline.toml", "inputs": "runs/pr", "baseline": ""}


def test_junit_strips_characters_xml_cannot_hold() -> None:
    text = '[[budgets]]\nname = "bell\\u0007"\nmetric = "step_ns"\nmax = 1e4\n'
    root = ET.fromstring(render_junit(make_report(text=text)))
    assert [c.get("name") for c in root.iter("testcase")] == ["bell?"]


def test_github_annotations(report: CheckReport) -> None:
    lines = render_github(report).splitlines()
    assert lines == [
        "::error file=timeline.toml,line=1,title=timeline check%3A exposed comm per step (FAIL)::"
        "exposed_comm_ratio p90 = 26.50%25 > max 25.00%25; worst sample rank 1, iteration 0: 39.00%25",
        "::error file=timeline.toml,line=7,title=timeline check%3A step%2C 100%25 of it%3A ok (FAIL)::"
        "exposed_comm_ns max of rank 1 (the worst rank) = 390 ns > max 200 ns; worst sample rank 1, "
        "iteration 0: "
        "390 ns",
        '::error file=timeline.toml,line=13,title=timeline check%3A rank 9 <missing> & "quoted" (NO DATA)::'
        "no data: no rank 9 in runs/pr (ranks 0, 1)",
    ]
    passing = render_github(make_report(text='[[budgets]]\nmetric = "step_ns"\nmax = 1e4\n'))
    assert passing == "::notice title=timeline check::1 check, all hold\n"


def test_github_escapes_newlines_and_percent() -> None:
    text = '[[budgets]]\nname = "a\\nb"\nmetric = "step_ns"\nmax = 1\n'
    (line,) = render_github(make_report(text=text)).splitlines()
    assert line.startswith("::error file=timeline.toml,line=1,title=timeline check%3A a%0Ab (FAIL)::")


def test_markdown(report: CheckReport) -> None:
    markdown = render_markdown(report)
    lines = markdown.splitlines()
    assert lines[0] == "### ❌ timeline check: 4 checks: 2 failed, 1 without data"
    assert lines[2] == "| | check | metric | value | limit | worst (rank, iteration) |"
    assert lines[4] == (
        "| ❌ | exposed comm per step | `exposed_comm_ratio` p90 | 26.50% | ≤ 25.00% | rank 1, "
        "iteration 0: 39.00% |"
    )
    assert lines[6].startswith('| ⚠️ | rank 9 <missing> & "quoted" | `step_ns` max |')
    assert lines[7].startswith("| ⏭️ | step_ns mean vs baseline |")
    assert "<details><summary>Why</summary>" in lines
    assert lines[-1] == "Budgets `timeline.toml` · run `runs/pr`"
    piped = render_markdown(make_report(text='[[budgets]]\nname = "a | b"\nmetric = "step_ns"\nmax = 1e4\n'))
    assert "| ✅ | a \\| b |" in piped
    assert piped.splitlines()[0] == "### ✅ timeline check: 1 check, all hold"
