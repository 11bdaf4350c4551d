"""The collectives views: their prepared data against CollectiveMatch, their bokeh structure, the HTML."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from tests.builders import REPO, TRACES, run_of
from timeline.report.collectives_view import (
    ALL_ITERATIONS,
    HEATMAP_SCHEMA,
    TABLE_SCHEMA,
    WAIT_TRANSFER_SCHEMA,
    collective_table,
    has_collectives,
    wait_heatmap,
    wait_transfer_by_rank,
    wait_transfer_tables,
)
from timeline.report.data import ReportData, prepare_report_data
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


def test_collective_table_has_one_row_per_logical_collective(param: ReportData) -> None:
    match = param.collectives
    assert match is not None
    assert has_collectives(match)
    table = collective_table(match)
    assert table.schema == TABLE_SCHEMA
    assert table.height == 8
    assert table.get_column("collective_id").to_list() == list(range(8))
    expected = match.collectives.select(TABLE_SCHEMA.names())
    assert table.equals(expected)
    assert table.get_column("ranks").to_list() == [8] * 8


def test_wait_and_transfer_per_rank_sum_to_the_matchs_numbers(param: ReportData) -> None:
    match = param.collectives
    assert match is not None
    bars = wait_transfer_by_rank(match)
    assert bars.schema == WAIT_TRANSFER_SCHEMA
    assert bars.get_column("rank").to_list() == list(range(8))
    per_rank = match.ranks.group_by("rank").agg(
        pl.col("wait_ns").sum(), pl.col("transfer_ns").sum(), pl.len()
    )
    for row in bars.iter_rows(named=True):
        mine = per_rank.filter(pl.col("rank") == row["rank"]).row(0, named=True)
        assert (row["wait_ns"], row["transfer_ns"], row["collectives"]) == (
            mine["wait_ns"],
            mine["transfer_ns"],
            mine["len"],
        )
    assert bars.get_column("wait_ns").sum() == match.collectives.get_column("total_wait_ns").sum()
    ranks = match.collectives.get_column("ranks").cast(pl.Int64)
    assert bars.get_column("transfer_ns").sum() == (match.collectives.get_column("transfer_ns") * ranks).sum()
    # The one iteration of the set is the whole trace; an iteration without collectives gives zeros.
    assert wait_transfer_by_rank(match, iteration=10).equals(bars)
    empty = wait_transfer_by_rank(match, iteration=999)
    assert empty.height == 8
    assert empty.get_column("wait_ns").sum() == 0


def test_wait_heatmap_has_a_cell_per_rank_and_iteration(param: ReportData, gloo: ReportData) -> None:
    for data, ranks, iterations in ((param, 8, [10]), (gloo, 4, None)):
        match = data.collectives
        assert match is not None
        cells = wait_heatmap(match, windows=data.overlap.windows)
        assert cells.schema == HEATMAP_SCHEMA
        columns = cells.get_column("iteration").unique().to_list()
        if iterations is not None:
            assert columns == iterations
        steps = (
            data.overlap.windows.filter(pl.col("window") == "profiler_step").get_column("iteration").unique()
        )
        assert set(steps.to_list()) <= set(columns)
        assert cells.height == ranks * len(columns)
        assert cells.select("rank", "iteration").is_unique().all()
        assert cells.get_column("wait_ns").sum() == match.ranks.get_column("wait_ns").sum()


def test_wait_transfer_tables_offer_the_whole_trace_and_every_view(gloo: ReportData) -> None:
    match = gloo.collectives
    assert match is not None
    tables = wait_transfer_tables(match, gloo.views)
    assert list(tables) == [ALL_ITERATIONS, *[str(v) for v in gloo.views.get_column("view").to_list()]]
    total = sum(tables[ALL_ITERATIONS]["wait_ms"])
    per_view = sum(sum(t["wait_ms"]) for key, t in tables.items() if key != ALL_ITERATIONS)
    assert per_view == pytest.approx(total)


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
    match = param.collectives
    assert match is not None
    table = build_collective_table(match)
    assert table.name == "collective_match_table"
    body = table.text.split("<tbody>")[1]
    assert len(re.findall(r"<tr>", body)) == 8
    bars = build_wait_transfer(match)
    source = bars.select_one({"name": "wait_transfer_bars"})
    assert source.data["rank"] == [str(r) for r in range(8)]
    assert sum(source.data["wait_ms"]) == pytest.approx(int(match.ranks.get_column("wait_ns").sum()) / 1e6)
    heatmap = build_wait_heatmap(match, windows=param.overlap.windows)
    cells = heatmap.select_one({"name": "wait_heatmap_cells"})
    assert len(cells.data["wait_ms"]) == 8 * 1


def test_dashboard_has_the_section_and_the_scope_follows_the_selector(gloo: ReportData) -> None:
    dashboard = build_dashboard(gloo, mode="standalone")
    names = [m.name for m in dashboard.document().models if m.name]
    for name in ("collectives_section", "collective_match_table", "wait_transfer", "wait_heatmap"):
        assert names.count(name) == 1, name
    scope = dashboard.layout.select_one({"name": "collectives_scope"})
    assert scope.value == ALL_ITERATIONS
    assert [o[0] for o in scope.options] == [ALL_ITERATIONS, "0", "1", "2"]
    assert len(dashboard.select.js_property_callbacks["change:value"]) >= 2


def test_no_section_below_two_ranks(param: ReportData) -> None:
    assert build_collectives_section(None, param.views, param.overlap.windows) is None
    match = param.collectives
    assert match is not None
    one_rank = type(match)(
        collectives=match.collectives,
        ranks=match.ranks.filter(pl.col("rank") == 0),
        mismatches=match.mismatches,
    )
    assert not has_collectives(one_rank)
    assert build_collectives_section(one_rank, param.views, param.overlap.windows) is None


def test_horovod_report_has_no_collectives_section() -> None:
    data = _prepare(
        TRACES / "horovod" / "dexhunter_allreduce-experiments" / "horovod-results__15gpu__15gpu-nccl.json"
    )
    assert data.collectives is None
    names = [m.name for m in build_dashboard(data, mode="live").document().models if m.name]
    assert "collectives_section" not in names


def test_exported_html_contains_the_collectives_views(param: ReportData) -> None:
    text = render_report_html(param, files=8)
    for name in ("collectives_section", "collective_match_table", "wait_transfer_bars", "wait_heatmap_cells"):
        assert name in text, name
    assert "Collectives across ranks" in text
    assert "busbw (Gbit/s)" in text
