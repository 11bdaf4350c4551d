"""The views beside the Gantt: step breakdown bars, an exposure heat map, and the summary tables.

Takes :class:`~timeline.report.data.ReportData` and gives bokeh models:

- :func:`build_breakdown`: one stacked bar per iteration and rank, the step split into compute,
  hidden and exposed communication, other busy time and idle (bokeh ``vbar_stack``); its source
  has a ``view`` column so that a click can select the iteration;
- :func:`build_heatmap`: exposed communication over step per iteration × rank (bokeh ``rect``
  cells on a colour scale);
- :func:`build_summary_table` (one view's ranks, as plain HTML: :func:`summary_tables` gives every
  view's, for swapping) and :func:`build_collectives_table` (the top exposed collectives).

Every box stretches to the window's width; a table wider than its box scrolls inside it
(:mod:`timeline.report.layout`).
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

import polars as pl
from bokeh.models import ColumnDataSource, DataRange1d, FactorRange, HoverTool, TapTool
from bokeh.models.annotations import Title
from bokeh.models.widgets import Div
from bokeh.plotting import figure

from timeline.report.data import BREAKDOWN_PARTS, ReportData, format_ns
from timeline.report.gantt import PALETTE
from timeline.report.layout import MIN_SIDE_WIDTH, STRETCH, html_box, legend_html, scroll_box
from timeline.results.summary import top_collectives

__all__ = [
    "PART_COLOURS",
    "PART_LABELS",
    "Breakdown",
    "build_breakdown",
    "build_collectives_table",
    "build_heatmap",
    "build_summary_table",
    "dimension_rows",
    "summary_tables",
    "view_rows",
]

PART_LABELS: dict[str, str] = {
    "compute_only_ns": "compute",
    "hidden_comm_ns": "hidden comm",
    "exposed_comm_ns": "exposed comm",
    "other_busy_ns": "memcpy/memset",
    "idle_ns": "idle",
    "unknown_comm_ns": "comm (exposure unknown)",
    "unknown_ns": "not in the timeline",
}
PART_COLOURS: dict[str, str] = {
    "compute_only_ns": PALETTE["compute"],
    "hidden_comm_ns": PALETTE["communication (hidden)"],
    "exposed_comm_ns": PALETTE["exposed communication"],
    "other_busy_ns": PALETTE["memcpy/memset"],
    "idle_ns": "#EFEFEF",
    "unknown_comm_ns": PALETTE["wire (exposure unknown)"],
    "unknown_ns": "#E2E2E2",
}


@dataclass(frozen=True)
class Breakdown:
    """The stacked bar chart, its source (``name="breakdown_bars"``, one row per view and rank), its legend.

    ``legend`` is a ``Div`` (``name="breakdown_legend"``): the chart's title and its parts' colours,
    drawn above the chart.
    """

    figure: Any
    source: ColumnDataSource
    legend: Div


def _view_tag(iteration: int | None) -> str:
    return "whole" if iteration is None else f"it {iteration}"


def view_rows(data: ReportData, view: int) -> list[int]:
    """Return the row indices of ``view`` in the breakdown and summary-table sources."""
    views = data.breakdown.get_column("view").to_list()
    return [i for i, v in enumerate(views) if v == view]


def build_breakdown(data: ReportData, *, height: int = 300) -> Breakdown:
    """Return the stacked bars of every iteration and rank: where each step's time went.

    The parts (:data:`~timeline.report.data.BREAKDOWN_PARTS`) sum to the step; parts that are zero
    everywhere are left out of the legend. Clicking a bar selects its row in the source (a caller
    links that to the iteration selector). The chart stretches to its box's width.
    """
    frame = data.breakdown
    parts = [p for p in BREAKDOWN_PARTS if frame.height and frame.get_column(p).sum() > 0] or ["idle_ns"]
    factors = [
        (_view_tag(it), f"r{rank}")
        for it, rank in zip(
            frame.get_column("iteration").to_list(), frame.get_column("rank").to_list(), strict=True
        )
    ]
    columns: dict[str, Any] = {
        "x": factors,
        "view": frame.get_column("view").to_numpy(),
        "rank": frame.get_column("rank").to_numpy(),
        "step": [format_ns(v) for v in frame.get_column("step_ns").to_list()],
    }
    for part in parts:
        columns[part] = (frame.get_column(part) / 1e6).to_numpy()
        columns[f"{part}_text"] = [format_ns(v) for v in frame.get_column(part).to_list()]
    source = ColumnDataSource(data=columns, name="breakdown_bars")
    fig = figure(
        name="breakdown",
        x_range=FactorRange(factors=list(dict.fromkeys(factors)), group_padding=0.8),
        y_range=DataRange1d(start=0),
        sizing_mode=STRETCH,
        min_width=MIN_SIDE_WIDTH,
        height=height,
        tools="xpan,xwheel_zoom,reset,save",
        toolbar_location="right",
        y_axis_label="ms",
    )
    renderers: list[Any] = fig.vbar_stack(
        parts,
        x="x",
        width=0.8,
        source=source,
        color=[PART_COLOURS[p] for p in parts],
        line_color="white",
        line_width=0.5,
        selection_fill_alpha=1.0,
        nonselection_fill_alpha=0.35,
    )
    lines = "".join(f"<div>{PART_LABELS[p]}: @{p}_text</div>" for p in parts)
    fig.add_tools(
        HoverTool(renderers=renderers, tooltips=f"<div><b>@x</b>, step @step</div>{lines}"),
        TapTool(renderers=renderers),
    )
    for axis in fig.xaxis:
        axis.update(major_label_orientation=1.0, major_label_text_font_size="7pt")
    for grid in fig.xgrid:
        grid.update(grid_line_color=None)
    title = "<b>Where each step went, per iteration and rank</b> (click a bar: show it)"
    swatches = legend_html([(PART_LABELS[p], PART_COLOURS[p], PART_COLOURS[p]) for p in parts])
    legend = Div(text=f"{title}{swatches}", sizing_mode=STRETCH, name="breakdown_legend")
    return Breakdown(figure=fig, source=source, legend=legend)


def build_heatmap(data: ReportData, *, height: int = 300) -> Any:
    """Return a heat map of exposed communication over step, per iteration × rank (bokeh ``rect``).

    On Horovod-only data, where exposure is unknown, it shows communication over step instead.
    Its cells' source (``name="heatmap_cells"``) carries a ``view`` column; clicking a cell selects it.
    The colour scale runs from 0 (white) to 1 (dark red), with its bar beside the cells.
    """
    from bokeh.models import LinearColorMapper
    from bokeh.models.annotations import ColorBar
    from bokeh.palettes import Reds256

    source, label, ranks = _heatmap_cells(data)
    mapper = LinearColorMapper(palette=list(reversed(Reds256)), low=0.0, high=1.0)
    fig = figure(
        name="heatmap",
        title=Title(text=f"{label} (click a cell: show it)", text_font_size="10pt"),
        x_range=FactorRange(factors=list(dict.fromkeys(source.data["iteration"]))),
        y_range=FactorRange(factors=ranks),
        sizing_mode=STRETCH,
        min_width=MIN_SIDE_WIDTH,
        height=height,
        tools="tap,save",
        toolbar_location="right",
        x_axis_label="iteration",
        y_axis_label="rank",
    )
    cells = fig.rect(
        x="iteration",
        y="rank",
        width=1,
        height=1,
        source=source,
        fill_color={"field": "value", "transform": mapper},
        line_color=None,
        nonselection_fill_alpha=0.5,
    )
    fig.add_tools(
        HoverTool(
            renderers=[cells],
            tooltips=[("iteration", "@iteration"), ("rank", "@rank"), (label, "@value{0.0%}")],
        )
    )
    fig.add_layout(ColorBar(color_mapper=mapper, width=10, major_label_text_font_size="8pt"), "right")
    for axis in fig.xaxis:
        axis.update(major_label_orientation=0.8, major_label_text_font_size="8pt")
    for grid in fig.grid:
        grid.update(grid_line_color=None)
    return fig


def _heatmap_cells(data: ReportData) -> tuple[ColumnDataSource, str, list[str]]:
    """Return the heat map's cells (one per iteration × rank, by view and rank), its label, its ranks.

    The value is exposed communication over step, or communication over step where no exposure is
    known (Horovod); a missing value is 0.
    """
    frame = data.overlap.iterations.join(
        data.breakdown.select("rank", "iteration", "view"),
        on=["rank", "iteration"],
        how="inner",
        nulls_equal=True,
    ).sort("view", "rank")
    known = frame.get_column("exposed_comm_ratio").is_not_null().any()
    value = "exposed_comm_ratio" if known else "comm_ratio"
    label = "exposed comm / step" if known else "comm / step (exposure unknown)"
    table = frame.select(
        iteration=pl.format("it {}", pl.col("iteration")).fill_null("whole"),
        rank=pl.format("r{}", pl.col("rank")),
        value=pl.col(value).fill_null(0.0),
        view=pl.col("view"),
    )
    source = ColumnDataSource(
        data={
            "iteration": table.get_column("iteration").to_list(),
            "rank": table.get_column("rank").to_list(),
            "value": table.get_column("value").to_numpy(),
            "view": table.get_column("view").to_numpy(),
        },
        name="heatmap_cells",
    )
    ranks = [f"r{r}" for r in frame.get_column("rank").unique().sort().to_list()]
    return source, label, ranks


def _summary_frame(data: ReportData) -> pl.DataFrame:
    rows = data.overlap.iterations.join(
        data.breakdown.select("rank", "iteration", "view"),
        on=["rank", "iteration"],
        how="inner",
        nulls_equal=True,
    ).sort("view", "rank")

    def ratio(name: str) -> pl.Expr:
        return pl.col(name).map_elements(lambda v: f"{100 * v:.1f}%", return_dtype=pl.String).fill_null("-")

    def time(name: str) -> pl.Expr:
        return pl.col(name).map_elements(format_ns, return_dtype=pl.String).fill_null("-")

    return rows.select(
        "view",
        rank=pl.col("rank").cast(pl.String),
        iteration=pl.col("iteration").cast(pl.String).fill_null("whole trace"),
        mode="mode",
        step=time("step_ns"),
        compute=time("compute_ns"),
        comm=time("comm_ns"),
        hidden=time("hidden_comm_ns"),
        exposed=time("exposed_comm_ns"),
        exposed_step=ratio("exposed_comm_ratio"),
        hidden_comm=ratio("hidden_comm_ratio"),
        idle_step=ratio("idle_ratio"),
    )


_CELL = "padding:2px 8px;border-bottom:1px solid #e5e5e5;text-align:right;font-size:12px;white-space:nowrap"
_HEAD = "padding:2px 8px;border-bottom:2px solid #999;text-align:right;font-size:12px;white-space:nowrap"


def _html_table(headers: list[str], rows: list[list[str]]) -> str:
    """Return a plain HTML table (a bokeh ``Div`` needs no table library: the page loads faster)."""
    head = "".join(f'<th style="{_HEAD}">{html.escape(h)}</th>' for h in headers)
    body = "".join(
        "<tr>" + "".join(f'<td style="{_CELL}">{html.escape(str(c))}</td>' for c in row) + "</tr>"
        for row in rows
    )
    return (
        f'<table style="border-collapse:collapse"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
    )


_SUMMARY_HEADERS = {
    "rank": "rank",
    "iteration": "iteration",
    "mode": "mode",
    "step": "step",
    "compute": "compute",
    "comm": "comm",
    "hidden": "hidden",
    "exposed": "exposed",
    "exposed_step": "exposed/step",
    "hidden_comm": "hidden/comm",
    "idle_step": "idle/step",
}


def summary_tables(data: ReportData) -> list[str]:
    """Return, for each view, the HTML table of its ranks (the rows of ``timeline analyze``).

    Where the traces name a mesh dimension other than the world, the table of the view's
    communication per dimension follows (:func:`dimension_rows`).
    """
    frame = _summary_frame(data)
    tables = []
    views = data.views.select("view", "iteration").rows()
    for view, iteration in views:
        rows = frame.filter(pl.col("view") == view).select(list(_SUMMARY_HEADERS)).rows()
        # a whole-trace row measures the span of the trace, not one step (as timeline analyze says)
        headers = [h.replace("step", "span") if iteration is None else h for h in _SUMMARY_HEADERS.values()]
        table = _html_table(headers, [list(r) for r in rows])
        per_dimension = dimension_rows(data, view)
        if per_dimension:
            title = '<div style="font-size:12px;margin-top:8px"><b>Communication per dimension</b></div>'
            table += title + _html_table(list(_DIMENSION_HEADERS), per_dimension)
        tables.append(scroll_box(table))
    return tables


_DIMENSION_HEADERS = (
    "dimension",
    "ranks",
    "comm mean",
    "hidden mean",
    "exposed mean",
    "exposed max",
    "worst rank",
)


def dimension_rows(data: ReportData, view: int) -> list[list[str]]:
    """Return the breakdown per dimension of one view, across its ranks (empty: the world alone, no groups).

    One row per dimension: how many ranks ran its communication, the mean over those ranks of its
    communication, hidden and exposed time (:mod:`timeline.analysis.dimensions`), the largest exposed
    time and the rank it was on.
    """
    if data.dimensions is None:
        return []
    rows = data.dimensions.filter(pl.col("view") == view)
    if rows.get_column("dimension").unique().to_list() in ([], ["world"]):
        return []
    table = (
        rows.group_by("dimension")
        .agg(
            ranks=pl.len(),
            comm=pl.col("comm_ns").mean(),
            hidden=pl.col("hidden_ns").mean(),
            exposed=pl.col("exposed_ns").mean(),
            worst=pl.col("exposed_ns").max(),
            worst_rank=pl.col("rank").sort_by("exposed_ns", "rank", descending=[True, False]).first(),
        )
        .sort("exposed", "dimension", descending=[True, False])
    )
    return [
        [
            row["dimension"],
            str(row["ranks"]),
            format_ns(row["comm"]),
            format_ns(row["hidden"]),
            format_ns(row["exposed"]),
            format_ns(row["worst"]),
            str(row["worst_rank"]),
        ]
        for row in table.iter_rows(named=True)
    ]


def build_summary_table(data: ReportData, view: int) -> Div:
    """Return the per-rank table of one view (``name="summary_table"``); a caller swaps its text."""
    tables = summary_tables(data)
    text = tables[view] if 0 <= view < len(tables) else ""
    box: Div = html_box(text, name="summary_table")
    return box


def build_collectives_table(data: ReportData) -> Div:
    """Return the top exposed collectives over the whole trace (``timeline analyze``'s table)."""
    top = top_collectives(data.overlap.collectives, limit=15)
    # Horovod: exposure unknown on every event (the sum of nulls would read as 0).
    known = bool(data.overlap.collectives.get_column("exposed_ns").is_not_null().any())
    rows = [
        [
            row["collective"] or "unknown",
            row["pg_name"] or "-",
            "-" if row["in_bytes"] is None else f"{row['in_bytes']:,}",
            str(row["calls"]),
            str(row["ranks"]),
            format_ns(row["dur_ns"]),
            format_ns(row["exposed_ns"]) if known else "-",
            "-" if row["exposed_ratio"] is None or not known else f"{100 * row['exposed_ratio']:.1f}%",
        ]
        for row in top.iter_rows(named=True)
    ]
    headers = ["collective", "group", "bytes", "calls", "ranks", "time", "exposed", "exposed/time"]
    box: Div = html_box(scroll_box(_html_table(headers, rows)), name="collectives_table")
    return box
