"""The report's bokeh models: their structure and data, not their pixels."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.builders import REPO, TRACES, run_of
from timeline.errors import UsageError
from timeline.report.data import STYLES, ReportData, default_view, prepare_report_data
from timeline.trace import load

bokeh = pytest.importorskip("bokeh", reason="the report needs the 'report' extra: pip install -e '.[report]'")

from bokeh.document import Document  # noqa: E402
from bokeh.events import RangesUpdate  # noqa: E402

from timeline.report.breakdown import (  # noqa: E402
    PART_LABELS,
    build_breakdown,
    build_heatmap,
    build_summary_table,
    summary_tables,
)
from timeline.report.dashboard import build_dashboard  # noqa: E402
from timeline.report.export import render_report_html, write_report  # noqa: E402
from timeline.report.gantt import build_gantt, lane_factors  # noqa: E402

PARAM = TRACES / "kineto" / "param_dlrm_8rank"
GLOO = REPO / "sample_traces" / "ddp_gloo_4rank"
COLUMNS = {"y", "left", "right", "style", "name", "collective", "dimension", "count", "dur_us", "exposed_us"}
COLUMNS |= {"bytes"}
COLUMNS |= {"rank", "height"}


def _prepare(path: Path) -> ReportData:
    events = load([path]).events
    return prepare_report_data(run_of(events))


@pytest.fixture(scope="module")
def param() -> ReportData:
    return _prepare(PARAM)


@pytest.fixture(scope="module")
def gloo() -> ReportData:
    return _prepare(GLOO)


def test_gantt_has_one_lane_per_rank_and_stream_and_the_bars_data(param: ReportData) -> None:
    plot = build_gantt(param, 0)
    assert plot.figure.name == "gantt"
    assert set(plot.source.data) == COLUMNS
    factors = list(plot.y_range.factors)
    assert len(factors) == 40
    assert factors[-1] == ("rank 0", "exposed comm")  # FactorRange lists bottom to top: rank 0 on top
    assert factors[0] == ("rank 7", "stream 22 · copy")
    assert {tuple(y) for y in plot.source.data["y"]} <= set(factors)
    assert set(plot.source.data["style"]) <= set(STYLES)
    assert plot.x_range.start == 0.0
    assert plot.x_range.end == pytest.approx(20.823)  # ms: the earliest window start to the latest end
    assert "iteration 10" in str(plot.title.text)


def test_gantt_exposed_segments_equal_the_analyzers_numbers(param: ReportData) -> None:
    data = build_gantt(param, 0).source.data
    exposed: dict[int, float] = {}
    for y, style, dur, rank in zip(data["y"], data["style"], data["dur_us"], data["rank"], strict=True):
        if style == "exposed communication" and y[1] == "exposed comm":
            exposed[int(rank)] = exposed.get(int(rank), 0.0) + float(dur)
    expected = param.overlap.iterations.select("rank", "exposed_comm_ns").rows()
    assert {rank: round(us * 1000) for rank, us in exposed.items()} == dict(expected)


def test_gantt_tooltip_names_every_field(param: ReportData) -> None:
    plot = build_gantt(param, 0)
    hover = next(t for t in plot.figure.tools if type(t).__name__ == "HoverTool")
    labels = [label for label, _ in hover.tooltips]
    assert labels == [
        "name",
        "kind",
        "lane",
        "start",
        "duration",
        "events",
        "collective",
        "dimension",
        "bytes",
        "exposed",
    ]
    comm = [i for i, s in enumerate(plot.source.data["style"]) if s == "communication (hidden)"]
    assert comm
    assert all(plot.source.data["collective"][i] in {"all_reduce", "all_to_all"} for i in comm)


def test_rank_filter_keeps_only_those_lanes(param: ReportData) -> None:
    plot = build_gantt(param, 0, ranks=[2, 5])
    assert {f[0] for f in plot.y_range.factors} == {"rank 2", "rank 5"}
    assert {int(r) for r in plot.source.data["rank"]} == {2, 5}
    assert len(lane_factors(param, ranks=[2])) == 5


def test_breakdown_bars_stack_to_the_step_and_name_their_view(gloo: ReportData) -> None:
    breakdown = build_breakdown(gloo)
    data = breakdown.source.data
    assert len(data["x"]) == 12  # 3 iterations × 4 ranks
    parts = [p for p in PART_LABELS if p in data]
    totals = [sum(float(data[p][i]) for p in parts) for i in range(12)]
    steps = gloo.breakdown.get_column("step_ns").to_list()
    assert totals == pytest.approx([s / 1e6 for s in steps])
    assert sorted({int(r) for r in data["view"]}) == [0, 1, 2]
    assert any(type(t).__name__ == "TapTool" for t in breakdown.figure.tools)


def test_heatmap_cells_are_each_ranks_exposed_share_of_each_step_with_their_view(gloo: ReportData) -> None:
    fig = build_heatmap(gloo)
    assert fig.name == "heatmap"
    cells = [r.data_source for r in fig.renderers if "view" in r.data_source.data]
    assert len(cells) == 1
    assert cells[0].name == "heatmap_cells"
    data = cells[0].data
    assert len(data["view"]) == 12  # 3 iterations × 4 ranks
    # each cell: the rank's exposed communication over its step, read from the analysis' own columns
    rows = gloo.overlap.iterations.select("rank", "iteration", "exposed_comm_ns", "step_ns").rows()
    expected = {(f"it {it}", f"r{rank}"): exposed / step for rank, it, exposed, step in rows}
    got = dict(zip(zip(data["iteration"], data["rank"], strict=True), data["value"], strict=True))
    assert got == pytest.approx(expected)
    assert any(type(t).__name__ == "TapTool" for t in fig.tools)


def test_the_report_imports_no_holoviews(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from timeline.report.export import render_report_html\n"
        "from timeline.report.data import prepare_report_data\n"
        "from tests.builders import run_of\n"
        "from timeline.trace import load\n"
        f"render_report_html(prepare_report_data(run_of(load([{str(GLOO)!r}]).events)))\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('holoviews', 'panel', 'pandas')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_summary_table_shows_the_selected_views_rows(gloo: ReportData) -> None:
    table = build_summary_table(gloo, 1)
    assert table.name == "summary_table"
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", table.text)
    assert len(cells) == 4 * 11  # 4 ranks × 11 columns
    assert cells[1::11] == ["3"] * 4  # the iteration column: view 1 is iteration 3
    assert summary_tables(gloo)[1] == table.text


def test_standalone_dashboard_embeds_every_view_and_starts_on_the_slowest(gloo: ReportData) -> None:
    dashboard = build_dashboard(gloo, mode="standalone")
    doc = dashboard.document()
    names = [m.name for m in doc.models if m.name]
    ours = [
        "gantt",
        "gantt_bars",
        "iteration_select",
        "rank_filter",
        "breakdown_bars",
        "summary_table",
        "heatmap",
    ]
    for name in ours:  # the browser finds them by name: each must be unique
        assert names.count(name) == 1, name
    assert {f"gantt_levels_{v}" for v in range(3)} <= set(names)
    assert dashboard.select.value == str(default_view(gloo))
    assert [option[0] for option in dashboard.select.options if isinstance(option, tuple)] == ["0", "1", "2"]
    assert len(dashboard.gantt.source.data["left"]) == 0  # the browser draws the first bars
    assert dashboard.on_ready is not None


def test_live_dashboard_swaps_data_on_selection_zoom_and_rank_filter(gloo: ReportData) -> None:
    dashboard = build_dashboard(gloo, mode="live")
    doc = Document()
    doc.add_root(dashboard.layout)
    source = dashboard.gantt.source
    first = dashboard.gantt.title.text
    before = list(source.data["left"])
    assert before
    other = "0" if dashboard.select.value != "0" else "1"
    dashboard.select.value = other
    assert dashboard.gantt.title.text != first
    assert list(source.data["left"]) != before
    # Zoom: a Python callback re-queries the visible window (with half a window either side).
    full = max(source.data["count"])
    dashboard.gantt.figure._trigger_event(RangesUpdate(dashboard.gantt.figure, x0=10.0, x1=10.5))
    assert max(source.data["count"]) <= full
    assert min(source.data["right"]) >= 10.0 - 0.25
    assert max(source.data["left"]) <= 10.5 + 0.25
    dashboard.ranks.value = ["1"]
    assert {int(r) for r in source.data["rank"]} == {1}
    assert {f[0] for f in dashboard.gantt.y_range.factors} == {"rank 1"}


def test_exported_html_is_standalone(tmp_path: Path, gloo: ReportData) -> None:
    text = render_report_html(gloo, files=4)
    # Bokeh inlined, nothing fetched: the file opens offline.
    assert not re.search(r"<script[^>]*\ssrc=", text)
    assert not re.search(r"<link[^>]*\shref=", text)
    assert "gantt_levels_2" in text
    assert "/* BEGIN bokeh.min.js */" in text
    written = write_report(gloo, tmp_path / "report.html")
    assert written.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]
    with pytest.raises(UsageError, match="does not exist"):
        write_report(gloo, tmp_path / "missing" / "report.html")


def test_horovod_dashboard_builds(tmp_path: Path) -> None:
    data = _prepare(
        TRACES / "horovod" / "dexhunter_allreduce-experiments" / "horovod-results__15gpu__15gpu-nccl.json"
    )
    dashboard = build_dashboard(data, mode="live")
    styles = set(dashboard.gantt.source.data["style"])
    assert "wire (exposure unknown)" in styles
    assert "exposed communication" not in styles
    assert data.lanes.filter(pl.col("role") == "tensor").height == data.lanes.height


def test_no_legend_is_drawn_over_a_plot_and_every_box_follows_the_window(gloo: ReportData) -> None:
    from dataclasses import replace

    from bokeh.models import LayoutDOM, Plot
    from bokeh.models.annotations import Legend

    from timeline.report.whatif_view import whatif_sweep
    from timeline.run import Run

    run = Run.from_trace(load([GLOO]))
    dashboard = build_dashboard(replace(gloo, whatif=whatif_sweep(run)), mode="standalone")
    doc = dashboard.document()
    plots: list[Any] = list(doc.select({"type": Plot}))
    assert {p.name for p in plots} >= {"gantt", "breakdown", "heatmap", "whatif_plot", "wait_transfer"}
    for plot in plots:
        # beside the frame (above, below, left, right), never in it
        assert not [x for x in plot.center if isinstance(x, Legend)], plot.name
        assert plot.sizing_mode == "stretch_width", plot.name
    boxes: list[Any] = list(doc.select({"type": LayoutDOM}))
    for box in boxes:
        assert box.sizing_mode in ("stretch_width", None), (type(box).__name__, box.name)
        if box.sizing_mode is None:  # fixed: a widget narrow enough for any window of 1280 pixels
            assert box.width is not None, (type(box).__name__, box.name)
            assert box.width <= 420, (type(box).__name__, box.name)


def test_a_job_of_many_ranks_opens_on_16_of_them() -> None:
    from tests.report.builders import synthetic_events
    from timeline.report.dashboard import MAX_SHOWN_RANKS, default_ranks

    data = prepare_report_data(run_of(synthetic_events(4_000, ranks=20, steps=2)))
    view = default_view(data)
    iteration = data.views.item(view, "iteration")
    # independently: each rank's exposed communication in that iteration, from the analysis' rows
    rows = [
        (exposed, rank)
        for rank, it, exposed in data.overlap.iterations.select("rank", "iteration", "exposed_comm_ns").rows()
        if it == iteration
    ]
    most = sorted(rows, key=lambda r: (-r[0], r[1]))[:8]
    least = sorted((r for r in rows if r not in most), key=lambda r: (r[0], r[1]))[:8]
    expected = sorted(rank for _, rank in most + least)
    assert MAX_SHOWN_RANKS == 16
    assert default_ranks(data, view) == expected
    dashboard = build_dashboard(data, mode="live")
    assert [int(r) for r in dashboard.ranks.value] == expected
    assert len(dashboard.ranks.options) == 20
    assert {f[0] for f in dashboard.gantt.y_range.factors} == {f"rank {r}" for r in expected}
    header = dashboard.layout.select_one({"name": "header"}).text
    assert "the Gantt shows 16 of the 20 ranks" in header
    # ranks given by the caller: no such line
    chosen = build_dashboard(data, mode="live", ranks=[0, 1])
    assert "the Gantt shows" not in chosen.layout.select_one({"name": "header"}).text
    small = prepare_report_data(run_of(synthetic_events(2_000, ranks=4)))
    assert default_ranks(small, 0) == [0, 1, 2, 3]
