"""The Gantt chart of one view: one lane per rank × stream (thread, tensor), exposed communication in red.

Takes :class:`~timeline.report.data.ReportData` and gives a bokeh figure whose bars come from
:func:`~timeline.report.data.view_bars` (what is shorter than a pixel is merged, and the tooltip
says how many events a bar holds). Lanes are nested factors ``(rank, lane)``; one figure holds every
lane, so zoom and pan are shared by all of them. Communication is drawn pale with a red outline; the parts
of it during which no compute ran (the analyzer's exposed communication) are drawn over it in a
saturated red, and each rank's first lane, ``exposed comm``, holds only those.

Every bar is drawn in its style's own colour at full opacity: a bar of merged events is thinner
(:func:`bar_height`: the sparser its events, the thinner), never paler, so that it cannot take the
colour of another style (faint red would be the pale pink of hidden communication). Exposed
communication is never thinned: drawn full height over the communication it exposes, it hides it.

The figure is as wide as its box and :func:`lane_height` tall; its legend (:func:`gantt_legend`)
is HTML for the caller to place above it, so that it never covers a bar.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
from bokeh.models import ColumnDataSource, CustomJSHover, FactorRange, HoverTool, Range1d
from bokeh.models.annotations import Title
from bokeh.plotting import figure
from bokeh.transform import factor_cmap

from timeline.report.data import STYLES, ReportData, bar_label, format_ns, view_bars
from timeline.report.layout import MIN_PLOT_WIDTH, STRETCH, legend_html

__all__ = [
    "BAR_HEIGHT",
    "CHROME_PX",
    "LANE_PX",
    "MIN_HEIGHT",
    "OUTLINES",
    "PALETTE",
    "PIXELS",
    "GanttPlot",
    "bar_height",
    "build_gantt",
    "empty_columns",
    "gantt_columns",
    "gantt_key",
    "gantt_legend",
    "gantt_title",
    "lane_factors",
    "lane_height",
]

PALETTE: dict[str, str] = {
    "compute": "#5B84B1",
    "communication (hidden)": "#F3C6C2",
    "exposed communication": "#D7191C",
    "memcpy/memset": "#9A9A9A",
    "sync/wait": "#CFCFCF",
    "negotiation": "#9C7DC4",
    "queue": "#E8C547",
    "wait for data": "#BFD3C1",
    "wire (exposure unknown)": "#F28E2B",
    "other": "#E2E2E2",
}
"""The colour of each style: exposed communication is the only saturated red."""

OUTLINES: dict[str, str] = {**PALETTE, "communication (hidden)": "#E08A84"}
"""The outline of each style: hidden communication is pale with a red outline, so it reads as
communication even where it is pale. (Bars are outlined in their colour so that a bar narrower than
a pixel still shows. Hatching would say "hidden" better, but bokeh draws a per-bar hatch through a
canvas layer per bar: seconds for a few thousand bars.)"""

PIXELS = 1000
"""Bins across the visible range: about the width of the plot area in a window 1280 pixels wide
(a bar of merged events is then at most 1.7 pixels of a 1920-pixel window)."""
LANE_PX = 22
"""Height of one lane in pixels."""
CHROME_PX = 90
"""Height of the title and the time axis of the Gantt in pixels (its legend is HTML above it)."""
BAR_HEIGHT = 0.78
"""Height of a bar, as a fraction of its lane."""
MIN_HEIGHT = 0.3
"""The height of a merged bar whose events cover almost none of it, as a fraction of
:data:`BAR_HEIGHT` (1 when they cover all of it): thin enough to read as sparse, thick enough that its
colour is seen."""

_NUMBER_OR_DASH = """
if (value == null || Number.isNaN(value)) { return "-"; }
return value.toLocaleString("en-US", {maximumFractionDigits: 1});
"""


@dataclass(frozen=True)
class GanttPlot:
    """A Gantt figure and the models that swap its data.

    Attributes
    ----------
    figure
        The bokeh figure (``name="gantt"``).
    source
        Its bars (``name="gantt_bars"``): columns of :func:`gantt_columns`.
    x_range, y_range
        Time in ms since the view's start; the lanes as ``(rank, lane)`` factors, top to bottom.
    title
        The title naming the iteration.
    """

    figure: Any
    source: ColumnDataSource
    x_range: Range1d
    y_range: FactorRange
    title: Title


def lane_factors(data: ReportData, *, ranks: Sequence[int] | None = None) -> list[tuple[str, str]]:
    """Return the ``(group, label)`` factors of the lanes of ``ranks``, bottom to top for a FactorRange."""
    lanes = data.lanes if ranks is None else data.lanes.filter(pl.col("rank").is_in(list(ranks)))
    factors = list(zip(lanes.get_column("group").to_list(), lanes.get_column("label").to_list(), strict=True))
    return factors[::-1]


def lane_height(lanes: int) -> int:
    """Return the figure height in pixels for ``lanes`` lanes."""
    return CHROME_PX + LANE_PX * max(lanes, 4)


def gantt_columns(bars: pl.DataFrame, data: ReportData, *, origin_ns: int) -> dict[str, Any]:
    """Return the data-source columns of ``bars``: lanes as factors, times in ms since ``origin_ns``.

    Columns: ``y`` (``(rank, lane)``), ``left``, ``right`` (ms), ``style``, ``name`` (event name, or
    ``N events, mostly NAME`` for a merged bar), ``collective``, ``dimension`` (the mesh dimension of
    a collective, ``-`` when none or unknown, ``mixed`` for a merged bar of several), ``count``,
    ``dur_us`` (busy time), ``exposed_us`` and ``bytes`` (NaN when unknown), ``rank``, ``height``
    (:func:`bar_height`).
    """
    joined = bars.join(
        data.lanes.select("lane_id", "group", "label"), on="lane_id", how="left", maintain_order="left"
    )
    names = [
        bar_label(name, count)
        for name, count in zip(
            joined.get_column("name").to_list(), joined.get_column("count").to_list(), strict=True
        )
    ]
    return {
        "y": list(
            zip(joined.get_column("group").to_list(), joined.get_column("label").to_list(), strict=True)
        ),
        "left": ((joined.get_column("start_ns") - origin_ns) / 1e6).to_numpy(),
        "right": ((joined.get_column("end_ns") - origin_ns) / 1e6).to_numpy(),
        "style": joined.get_column("style").cast(pl.String).to_list(),
        "name": names,
        "collective": joined.get_column("collective").fill_null("-").to_list(),
        "dimension": joined.get_column("dimension").fill_null("-").to_list(),
        "count": joined.get_column("count").cast(pl.Int32).to_numpy(),
        "dur_us": (joined.get_column("dur_ns") / 1e3).to_numpy(),
        "exposed_us": (joined.get_column("exposed_ns").cast(pl.Float64) / 1e3).to_numpy(),
        "bytes": joined.get_column("in_bytes").cast(pl.Float64).to_numpy(),
        "rank": joined.get_column("rank").cast(pl.Int32).to_numpy(),
        "height": joined.select(
            bar_height(
                pl.col("dur_ns"), pl.col("end_ns") - pl.col("start_ns"), pl.col("count"), pl.col("style")
            )
        )
        .to_series()
        .to_numpy(),
    }


def bar_height(busy: pl.Expr, length: pl.Expr, count: pl.Expr, style: pl.Expr) -> pl.Expr:
    """Return the height of a bar (fraction of its lane): :data:`BAR_HEIGHT`, thinner for merged events.

    A bar of merged events (``count > 1``) is ``BAR_HEIGHT × (MIN_HEIGHT + (1 - MIN_HEIGHT) ×
    coverage)``, coverage being their summed duration ``busy`` over the bar's ``length`` (at most
    1); one event, or exposed communication, is ``BAR_HEIGHT``.
    """
    coverage = (busy.cast(pl.Float64) / pl.max_horizontal(length, 1)).clip(0.0, 1.0)
    thin = (count > 1) & (style.cast(pl.String) != "exposed communication")
    scale = MIN_HEIGHT + (1 - MIN_HEIGHT) * coverage
    return pl.when(thin).then(BAR_HEIGHT * scale).otherwise(BAR_HEIGHT).alias("height")


def empty_columns() -> dict[str, Any]:
    """Return the columns of :func:`gantt_columns` with no rows."""
    floats = np.zeros(0, dtype=np.float64)
    ints = np.zeros(0, dtype=np.int32)
    return {
        "y": [],
        "left": floats,
        "right": floats,
        "style": [],
        "name": [],
        "collective": [],
        "dimension": [],
        "count": ints,
        "dur_us": floats,
        "exposed_us": floats,
        "bytes": floats,
        "rank": ints,
        "height": floats,
    }


def gantt_title(data: ReportData, view: int) -> str:
    """Return the title of the Gantt of ``view``: which iteration, how many ranks, the longest step."""
    if data.views.height == 0:
        return "no events to draw"
    row = data.views.row(view, named=True)
    whole = row["iteration"] is None
    name = "whole trace" if whole else f"iteration {row['iteration']}"
    longest = "longest span" if whole else "longest step"
    title = f"{name} · {row['ranks']} rank(s) · {longest} {format_ns(row['step_ns'])}"
    if row["exposed_comm_ns"] is not None:
        title += f" · most exposed communication {format_ns(row['exposed_comm_ns'])}"
    return title


def gantt_key(data: ReportData) -> str:
    """Return how to read the Gantt's colours (the subtitle)."""
    modes = set(data.lanes.get_column("mode").to_list())
    thin = "thin = sub-pixel events merged: sparser = thinner"
    if modes == {"horovod"}:
        return (
            "Horovod phases per tensor · orange = on the wire (exposure needs the framework trace) · " + thin
        )
    return (
        "red = exposed communication (the step waits on the network) · pale pink = hidden under compute · "
        + thin
    )


def build_gantt(
    data: ReportData,
    view: int,
    *,
    ranks: Sequence[int] | None = None,
    pixels: int = PIXELS,
    with_bars: bool = True,
) -> GanttPlot:
    """Return the Gantt chart of one view.

    Parameters
    ----------
    data
        The prepared report data.
    view
        The view (iteration) to draw.
    ranks
        The ranks to draw (default: all).
    pixels
        Bins across the visible range: what is shorter than ``span / pixels`` is merged.
    with_bars
        Fill the bars now (False: leave the source empty, for a caller that fills it in the browser).

    Returns
    -------
    GanttPlot
        The figure and the models a caller swaps data through; nothing is shown. The figure is as
        wide as its box (at least :data:`~timeline.report.layout.MIN_PLOT_WIDTH`) and
        :func:`lane_height` tall; its legend is :func:`gantt_legend`, for the caller to place above.
    """
    factors = lane_factors(data, ranks=ranks)
    if data.views.height and with_bars:
        origin = data.views.item(view, "start_ns")
        columns = gantt_columns(view_bars(data, view, ranks=ranks, pixels=pixels), data, origin_ns=origin)
    else:
        columns = empty_columns()
    span_ms = 1.0
    if data.views.height:
        span_ms = max((data.views.item(view, "end_ns") - data.views.item(view, "start_ns")) / 1e6, 1e-6)
    source = ColumnDataSource(data=columns, name="gantt_bars")
    y_range = FactorRange(factors=factors, group_padding=0.8, subgroup_padding=0.4, range_padding=0.02)
    x_range = Range1d(start=0.0, end=span_ms, bounds=(0.0, span_ms), min_interval=1e-6)
    title = Title(text=gantt_title(data, view), text_font_size="11pt")
    fig = figure(
        name="gantt",
        title=title,
        x_range=x_range,
        y_range=y_range,
        sizing_mode=STRETCH,
        min_width=MIN_PLOT_WIDTH,
        height=lane_height(len(factors)),
        tools="xpan,xwheel_zoom,xbox_zoom,reset,save",
        active_drag="xpan",
        active_scroll="xwheel_zoom",
        x_axis_label="ms since the start of the iteration (earliest rank)",
        toolbar_location="right",
    )
    _draw_bars(fig, source)
    _style_lanes(fig)
    return GanttPlot(figure=fig, source=source, x_range=x_range, y_range=y_range, title=title)


def _draw_bars(fig: Any, source: ColumnDataSource) -> None:
    """Draw the bars of ``source`` on ``fig`` in their styles' colours, with their tooltip."""
    renderer = fig.hbar(
        y="y",
        left="left",
        right="right",
        height="height",
        source=source,
        fill_color=factor_cmap("style", [PALETTE[s] for s in STYLES], list(STYLES)),
        line_color=factor_cmap("style", [OUTLINES[s] for s in STYLES], list(STYLES)),
        line_width=1,
        name="gantt_glyphs",
    )
    number = CustomJSHover(code=_NUMBER_OR_DASH)
    targets: list[Any] = [renderer]
    fig.add_tools(
        HoverTool(
            renderers=targets,
            tooltips=[
                ("name", "@name"),
                ("kind", "@style"),
                ("lane", "@y"),
                ("start", "@left{0,0.000} ms"),
                ("duration", "@dur_us{custom} µs"),
                ("events", "@count{0,0}"),
                ("collective", "@collective"),
                ("dimension", "@dimension"),
                ("bytes", "@bytes{custom}"),
                ("exposed", "@exposed_us{custom} µs"),
            ],
            formatters={"@dur_us": number, "@bytes": number, "@exposed_us": number},
        )
    )


def _style_lanes(fig: Any) -> None:
    """Set the fonts of the lane labels and remove the horizontal grid lines."""
    for axis in fig.yaxis:
        axis.update(
            major_label_text_font_size="8pt", group_text_font_size="9pt", group_label_orientation="horizontal"
        )
    for grid in fig.ygrid:
        grid.update(grid_line_color=None)


def gantt_legend(data: ReportData) -> str:
    """Return the Gantt's legend as HTML: the styles present in any view, then how to read them."""
    present = set(data.segments.get_column("style").cast(pl.String).unique().to_list())
    items = [(style, PALETTE[style], OUTLINES[style]) for style in STYLES if style in present]
    return legend_html(items, note=gantt_key(data))
