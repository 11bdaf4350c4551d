"""The views beside the Gantt: step breakdown bars, an exposure heat map, and the summary tables.

Takes :class:`~timeline.report.data.ReportData` and gives bokeh models:

- :func:`build_breakdown`: one stacked bar per iteration and rank, the step split into compute,
  hidden and exposed communication, other busy time and idle (bokeh ``vbar_stack``); its source
  has a ``view`` column so that a click can select the iteration;
- :func:`build_heatmap`: exposed communication over step per iteration × rank, made with
  holoviews and rendered to a bokeh figure;
- :func:`build_summary_table` (one view's ranks, as plain HTML: :func:`summary_tables` gives every
  view's, for swapping) and :func:`build_collectives_table` (the top exposed collectives).
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

import polars as pl
from bokeh.models import ColumnDataSource, DataRange1d, FactorRange, HoverTool, TapTool
from bokeh.models.annotations import Legend, LegendItem, Title
from bokeh.models.widgets import Div
from bokeh.plotting import figure

from timeline.report.data import BREAKDOWN_PARTS, ReportData, format_ns
from timeline.report.gantt import PALETTE
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
    """The stacked bar chart and its source (``name="breakdown_bars"``, one row per view and rank)."""

    figure: Any
    source: ColumnDataSource


def _view_tag(iteration: int | None) -> str:
    return "whole" if iteration is None else f"it {iteration}"


def view_rows(data: ReportData, view: int) -> list[int]:
    """Return the row indices of ``view`` in the breakdown and summary-table sources."""
    views = data.breakdown.get_column("view").to_list()
    return [i for i, v in enumerate(views) if v == view]


def build_breakdown(data: ReportData, *, width: int = 480, height: int = 330) -> Breakdown:
    """Return the stacked bars of every iteration and rank: where each step's time went.

    The parts (:data:`~timeline.report.data.BREAKDOWN_PARTS`) sum to the step; parts that are zero
    everywhere are left out of the legend. Clicking a bar selects its row in the source (a caller
    links that to the iteration selector).
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
        title=Title(
            text="Where each step went, per iteration and rank (click a bar: show it)", text_font_size="10pt"
        ),
        x_range=FactorRange(factors=list(dict.fromkeys(factors)), group_padding=0.8),
        y_range=DataRange1d(start=0),
        width=width,
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
    # The legend draws its swatches from bars of height 0 of their own: with the stacked bars'
    # renderers (whose rows get selected) bokeh stops drawing the swatches after a repaint.
    anchor = ColumnDataSource(data={"x": factors[:1] or [("", "")], "top": [0.0]})
    items = []
    for part in parts:
        swatch: Any = fig.vbar(x="x", top="top", bottom=0, width=0, color=PART_COLOURS[part], source=anchor)
        items.append(LegendItem(label=PART_LABELS[part], renderers=[swatch]))
    legend = Legend(
        items=items, orientation="horizontal", ncols=3, label_text_font_size="8pt", glyph_width=14, spacing=4
    )
    legend.update(padding=4)
    fig.add_layout(legend, "above")
    for axis in fig.xaxis:
        axis.update(major_label_orientation=1.0, major_label_text_font_size="7pt")
    for grid in fig.xgrid:
        grid.update(grid_line_color=None)
    return Breakdown(figure=fig, source=source)


def build_heatmap(data: ReportData, *, width: int = 480, height: int = 260) -> Any:
    """Return a heat map of exposed communication over step, per iteration × rank (holoviews → bokeh).

    On Horovod-only data, where exposure is unknown, it shows communication over step instead.
    Its data source carries a ``view`` column; clicking a cell selects it.
    """
    import holoviews as hv

    hv.extension("bokeh", logo=False)
    frame = data.overlap.iterations.join(
        data.breakdown.select("rank", "iteration", "view"),
        on=["rank", "iteration"],
        how="inner",
        nulls_equal=True,
    )
    known = frame.get_column("exposed_comm_ratio").is_not_null().any()
    value = "exposed_comm_ratio" if known else "comm_ratio"
    label = "exposed comm / step" if known else "comm / step (exposure unknown)"
    table = frame.select(
        iteration=pl.format("it {}", pl.col("iteration")).fill_null("whole"),
        rank=pl.format("r{}", pl.col("rank")),
        value=pl.col(value).fill_null(0.0),
        view=pl.col("view"),
    )
    heatmap = hv.HeatMap(
        table.to_pandas(),
        kdims=[hv.Dimension("iteration"), hv.Dimension("rank")],
        vdims=[hv.Dimension("value", label=label, range=(0, 1)), hv.Dimension("view")],
    ).opts(
        cmap="Reds",
        clim=(0.0, 1.0),
        colorbar=True,
        tools=["hover", "tap"],
        width=width,
        height=height,
        title=f"{label} (click a cell: show it)",
        xrotation=45,
        fontsize={"title": "10pt"},
        toolbar="right",
    )
    fig: Any = hv.render(heatmap, backend="bokeh")
    # holoviews asks for WebGL: a second renderer to load for a few cells.
    fig.update(name="heatmap", output_backend="canvas")
    for renderer in fig.renderers:
        if "view" in getattr(renderer.data_source, "data", {}):
            renderer.data_source.update(name="heatmap_cells")
    return fig


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
    for view in data.views.get_column("view").to_list():
        rows = frame.filter(pl.col("view") == view).select(list(_SUMMARY_HEADERS)).rows()
        table = _html_table(list(_SUMMARY_HEADERS.values()), [list(r) for r in rows])
        per_dimension = dimension_rows(data, view)
        if per_dimension:
            title = '<div style="font-size:12px;margin-top:8px"><b>Communication per dimension</b></div>'
            table += title + _html_table(list(_DIMENSION_HEADERS), per_dimension)
        tables.append(table)
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


def build_summary_table(data: ReportData, view: int, *, width: int = 760) -> Div:
    """Return the per-rank table of one view (``name="summary_table"``); a caller swaps its text."""
    tables = summary_tables(data)
    text = tables[view] if 0 <= view < len(tables) else ""
    return Div(text=text, width=width, name="summary_table")


def build_collectives_table(data: ReportData, *, width: int = 760) -> Div:
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
    return Div(text=_html_table(headers, rows), width=width, name="collectives_table")
