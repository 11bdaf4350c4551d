"""The collectives views: what they draw is the collectives report's, their bokeh structure, the HTML."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import polars as pl
import pytest

from tests.builders import REPO, TRACES, run_of
from timeline.report.collectives_view import (
    ALL_ITERATIONS,
    has_collectives,
    iteration_label,
    scope_rows,
    wait_transfer_tables,
)
from timeline.report.data import ReportData, prepare_report_data
from timeline.results.collectives import CollectivesReport, RankIterationWait, build_collectives_report
from timeline.trace import load

PARAM = TRACES / "kineto" / "param_dlrm_8rank"
GLOO = REPO / "sample_traces" / "ddp_gloo_4rank"


def _prepare(path: Path) -> ReportData:
    events = load([path]).events
    return prepare_report_data(run_of(events))


@pytest.fixture(scope="module")
def param() -> ReportData:
    return _prepare(PARAM)


@pytest.fixture(scope="module")
def gloo() -> ReportData:
    return _prepare(GLOO)


def _report(data: ReportData) -> CollectivesReport:
    assert data.collectives_report is not None
    return data.collectives_report


def test_the_report_draws_the_collectives_report_of_its_run(param: ReportData) -> None:
    """The section reads what ``timeline collectives`` prints: the same builder on the same run."""
    report = _report(param)
    assert has_collectives(report)
    command = build_collectives_report(run_of(load([PARAM]).events), rank_rows=False)
    assert msgspec.json.encode(report) == msgspec.json.encode(command)
    assert report.collective_ranks == []  # the tables' report: no per-rank rows
    match = param.collectives
    assert match is not None
    assert [row.collective_id for row in report.collectives] == match.collectives.get_column(
        "collective_id"
    ).to_list()


def test_scopes_are_the_whole_trace_or_one_iterations_cells(param: ReportData) -> None:
    report = _report(param)
    assert scope_rows(report) == report.wait_by_rank
    cells = scope_rows(report, iteration=10)
    assert [c.rank for c in cells] == list(range(8))
    assert all(isinstance(c, RankIterationWait) and c.iteration == 10 for c in cells)
    # the one iteration of the set holds every collective: its cells are the whole trace's figures
    assert [(c.rank, c.collectives, c.transfer_ns, c.wait_ns) for c in cells] == [
        (r.rank, r.collectives, r.transfer_ns, r.wait_ns) for r in report.wait_by_rank
    ]
    assert scope_rows(report, iteration=999) == []


def test_wait_transfer_tables_offer_the_whole_trace_and_every_view(gloo: ReportData) -> None:
    report = _report(gloo)
    tables = wait_transfer_tables(report, gloo.views)
    assert list(tables) == [ALL_ITERATIONS, *[str(v) for v in gloo.views.get_column("view").to_list()]]
    total = sum(tables[ALL_ITERATIONS]["wait_ms"])
    per_view = sum(sum(t["wait_ms"]) for key, t in tables.items() if key != ALL_ITERATIONS)
    assert per_view == pytest.approx(total)
    match = gloo.collectives
    assert match is not None
    assert total == pytest.approx(int(match.ranks.get_column("wait_ns").sum()) / 1e6)
    for key, table in tables.items():
        assert table["rank"] == ["0", "1", "2", "3"], key


def test_iteration_labels() -> None:
    assert (iteration_label(10), iteration_label(None)) == ("it 10", "outside")


bokeh = pytest.importorskip("bokeh", reason="the report needs the 'report' extra: pip install -e '.[report]'")

from timeline.report.collectives_view import (  # noqa: E402
    build_collective_table,
    build_collectives_section,
    build_wait_heatmap,
    build_wait_transfer,
)
from timeline.report.dashboard import build_dashboard  # noqa: E402
from timeline.report.export import render_report_html  # noqa: E402


def test_bokeh_builders_structure(param: ReportData) -> None:
    report = _report(param)
    match = param.collectives
    assert match is not None
    table = build_collective_table(report)
    assert table.name == "collective_match_table"
    body = table.text.split("<tbody>")[1]
    assert len(re.findall(r"<tr>", body)) == 8
    bars = build_wait_transfer(report)
    source = bars.select_one({"name": "wait_transfer_bars"})
    assert source.data["rank"] == [str(r) for r in range(8)]
    assert sum(source.data["wait_ms"]) == pytest.approx(int(match.ranks.get_column("wait_ns").sum()) / 1e6)
    heatmap = build_wait_heatmap(report)
    cells = heatmap.select_one({"name": "wait_heatmap_cells"})
    assert len(cells.data["wait_ms"]) == 8 * 1
    assert cells.data["label"] == ["it 10"] * 8


def test_dashboard_has_the_section_and_the_scope_follows_the_selector(gloo: ReportData) -> None:
    dashboard = build_dashboard(gloo, mode="standalone")
    names = [m.name for m in dashboard.document().models if m.name]
    for name in ("collectives_section", "collective_match_table", "wait_transfer", "wait_heatmap"):
        assert names.count(name) == 1, name
    scope = dashboard.layout.select_one({"name": "collectives_scope"})
    assert scope.value == ALL_ITERATIONS
    assert [o[0] for o in scope.options] == [ALL_ITERATIONS, "0", "1", "2"]
    assert len(dashboard.select.js_property_callbacks["change:value"]) >= 2


def test_the_section_starts_on_a_view(gloo: ReportData) -> None:
    report = _report(gloo)
    view, iteration = gloo.views.select("view", "iteration").row(1)
    section = build_collectives_section(report, gloo.views, view=view)
    assert section is not None
    assert section.scope.value == str(view)
    bars = section.wait_transfer.select_one({"name": "wait_transfer_bars"})
    assert bars.data["wait_ms"] == [cell.wait_ns / 1e6 for cell in scope_rows(report, iteration=iteration)]


def test_no_section_below_two_ranks(param: ReportData) -> None:
    assert build_collectives_section(None, param.views) is None
    report = _report(param)
    one_rank = msgspec.structs.replace(report, wait_by_rank=report.wait_by_rank[:1])
    assert not has_collectives(one_rank)
    assert build_collectives_section(one_rank, param.views) is None
    assert not has_collectives(msgspec.structs.replace(report, collectives=[]))


def test_horovod_report_has_no_collectives_section() -> None:
    data = _prepare(
        TRACES / "horovod" / "dexhunter_allreduce-experiments" / "horovod-results__15gpu__15gpu-nccl.json"
    )
    assert data.collectives is None
    assert data.collectives_report is None
    names = [m.name for m in build_dashboard(data, mode="live").document().models if m.name]
    assert "collectives_section" not in names


def test_exported_html_contains_the_collectives_views(param: ReportData) -> None:
    text = render_report_html(param, files=8)
    for name in ("collectives_section", "collective_match_table", "wait_transfer_bars", "wait_heatmap_cells"):
        assert name in text, name
    assert "Collectives across ranks" in text
    assert "busbw (Gbit/s)" in text


def test_a_section_without_views_offers_the_whole_trace(param: ReportData) -> None:
    """Without views (no iteration) the bars still offer the whole trace."""
    report = _report(param)
    section = build_collectives_section(report, param.views.filter(pl.lit(value=False)))
    assert section is not None
    assert [o[0] for o in section.scope.options] == [ALL_ITERATIONS]
