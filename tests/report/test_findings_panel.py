"""The report opens with the findings: the verdict, and each finding in full, selecting its ranks and
iteration.

The panel is checked on the models (what a finding selects, computed here from the report's views and
the diagnosis' typed data; each finding's sentence and fix in full), then in a real headless
Chromium (Debian's, driven by Playwright) on the exported HTML: clicking a finding's button sets the
iteration selector and the rank filter, and the Gantt redraws that iteration with those ranks only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.builders import REPO, run_of, run_timeline
from tests.report.builders import GANTT_DRAWN, LAUNCH_ARGS, ensure_chromium
from timeline.results.diagnosis import DiagnosisReport

pytest.importorskip("bokeh", reason="the report needs the 'report' extra: pip install -e '.[report]'")

GLOO = REPO / "sample_traces" / "ddp_gloo_4rank"


def _data_and_diagnosis() -> tuple[Any, DiagnosisReport]:
    from timeline import load
    from timeline.report.data import prepare_report_data
    from timeline.results.diagnosis import build_diagnosis

    run = run_of(load(GLOO))
    return prepare_report_data(run), build_diagnosis(run.diagnosis)


def test_each_finding_selects_its_first_iteration_and_its_ranks() -> None:
    from dataclasses import replace

    from timeline.report.dashboard import build_dashboard
    from timeline.report.findings_view import finding_targets

    data, diagnosis = _data_and_diagnosis()
    findings = diagnosis.findings
    assert findings, "the 4-rank sample has findings"
    targets = finding_targets(findings, diagnosis.verdict, data.views)
    # independently: the view whose iteration is the finding's first (else the first diagnosed one)
    views = {row["iteration"]: str(row["view"]) for row in data.views.to_dicts()}
    for finding, (view, ranks) in zip(findings, targets, strict=True):
        first = (finding.iterations or diagnosis.verdict.iterations or [])[0]
        assert view == views[first]
        assert ranks == (None if finding.ranks is None else list(finding.ranks))
    dashboard = build_dashboard(replace(data, diagnosis=diagnosis))
    doc = dashboard.document()
    import html

    from bokeh.models import ColumnDataSource
    from bokeh.models.widgets import Button, Div

    source = doc.select_one({"name": "findings"})
    verdict = doc.select_one({"name": "findings_verdict"})
    assert isinstance(source, ColumnDataSource)
    assert isinstance(verdict, Div)
    assert source.data["cause"] == [f.cause for f in findings]
    assert source.data["view"] == [t[0] for t in targets]
    assert html.escape(diagnosis.verdict.summary) in verdict.text
    for i, finding in enumerate(findings):
        block = doc.select_one({"name": f"finding_{i}"})
        button = doc.select_one({"name": f"finding_button_{i}"})
        assert isinstance(block, Div)
        assert isinstance(button, Button)
        # the sentence and the fix in full, never cut
        assert html.escape(finding.summary) in block.text
        assert html.escape(finding.fix) in block.text
        assert finding.cause in block.text


def test_the_report_opens_with_the_findings_and_a_row_selects_rank_and_iteration(tmp_path: Path) -> None:
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="needs the dev extra: pip install -e '.[dev]'"
    )
    executable = ensure_chromium()
    out = tmp_path / "report.html"
    done = run_timeline("report", GLOO, "-o", out)
    assert done.returncode == 0, done.stderr
    _data, diagnosis = _data_and_diagnosis()
    row = next(i for i, f in enumerate(diagnosis.findings) if f.ranks and f.iterations)
    finding = diagnosis.findings[row]
    assert finding.ranks is not None
    assert finding.iterations is not None
    playwright = sync_api.sync_playwright().start()
    try:
        browser = playwright.chromium.launch(executable_path=str(executable), args=LAUNCH_ARGS)
        page = browser.new_page(viewport={"width": 1660, "height": 1300})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.route("http*://**", lambda route: route.abort())  # offline
        page.goto(out.as_uri(), wait_until="commit")
        page.wait_for_function(GANTT_DRAWN, polling="raf", timeout=120_000)
        # the findings come first: the verdict and the findings are drawn above the iteration selector
        verdict = page.get_by_text("Verdict:").bounding_box()
        button = page.get_by_role("button", name="show").nth(row)
        selector = page.locator("select").first.bounding_box()
        assert verdict is not None
        assert selector is not None
        assert verdict["y"] < (button.bounding_box() or {"y": 1e9})["y"] < selector["y"]
        button.click()
        wanted = [str(r) for r in finding.ranks or ()]
        page.wait_for_function(
            "([w]) => JSON.stringify(Bokeh.documents[0].get_model_by_name('rank_filter').value) === w",
            arg=[str(wanted).replace("'", '"').replace(" ", "")],
            timeout=30_000,
        )
        iteration = finding.iterations[0]
        page.wait_for_function(
            f"() => Bokeh.documents[0].get_model_by_name('gantt').title.text.includes("
            f"'iteration {iteration}')",
            timeout=30_000,
        )
        page.wait_for_function(
            "([n]) => new Set(Bokeh.documents[0].get_model_by_name('gantt_bars').data.rank).size === n",
            arg=[len(finding.ranks)],
            timeout=30_000,
        )
        lanes = page.evaluate(
            "Array.from(new Set(Bokeh.documents[0].get_model_by_name('gantt_bars').data.rank))"
        )
        assert sorted(lanes) == sorted(finding.ranks)
        page.screenshot(path=tmp_path / "findings.png", full_page=True)
        assert errors == []
        browser.close()
    finally:
        playwright.stop()
