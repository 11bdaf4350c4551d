"""The what-if view: predicted scaling factor against link bandwidth, one curve per setting.

Takes a what-if report (:class:`~timeline.results.whatif.WhatIfReport`, what
:func:`timeline.results.whatif.build_whatif_report` returns and ``timeline whatif --json`` emits) and
gives a bokeh figure: x the link bandwidth (Gbit/s, log scale), y the predicted scaling factor
``T_single / T_predicted``, one line per combination of the other settings (world size,
compression, buckets, efficiency, algorithm), a hover with the predicted iteration time, exposed
communication and the no-overlap / perfect-overlap bounds, a dotted line at the trace's own scaling
factor and, with targets, a dashed line at the target scaling factor ("what bandwidth or compression
reaches X": where a curve crosses it). It draws what the report holds.

:func:`whatif_sweep` builds the report the dashboard's "What-if" tab shows (:data:`BANDWIDTHS_GBPS`
× :data:`COMPRESSIONS` at the measured world size) and :func:`build_whatif_panel` lays it out.

bokeh is imported inside the functions that draw, so importing this module costs nothing.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from concurrent.futures import Future

    from timeline.executors import LocalExecutor
    from timeline.results.whatif import ScenarioRow, WhatIfReport
    from timeline.run import Run
    from timeline.whatif.costs import Efficiency
    from timeline.whatif.graph import TraceGraph

__all__ = [
    "BANDWIDTHS_GBPS",
    "COMPRESSIONS",
    "SPLIT",
    "WhatIfSweep",
    "build_whatif_panel",
    "build_whatif_view",
    "curve_label",
    "joined_sweep",
    "submit_whatif_sweep",
    "sweep_part",
    "whatif_sweep",
]

BANDWIDTHS_GBPS: tuple[float, ...] = (1.0, 2.5, 5.0, 10.0, 25.0, 40.0, 100.0, 200.0, 400.0)
"""The link bandwidths of the report's what-if sweep (Gbit/s, one direction): 1 GbE to 400G links."""
COMPRESSIONS: tuple[float, ...] = (1.0, 2.0, 4.0)
"""The gradient compression ratios of the report's what-if sweep: one curve each."""


@dataclass(frozen=True)
class WhatIfSweep:
    """The what-if report the report's tab shows, or why there is none.

    Attributes
    ----------
    report
        The what-if report of :data:`BANDWIDTHS_GBPS` × :data:`COMPRESSIONS` (its scenarios, the
        trace's own scaling factor in ``self_replay``, its notes and warnings); None when the trace
        has no graph.
    note
        One line under the plot: how it was predicted, or why there is no prediction.
    """

    report: WhatIfReport | None
    note: str


def whatif_sweep(run: Run) -> WhatIfSweep:
    """Replay the run's what-if graph at :data:`BANDWIDTHS_GBPS` × :data:`COMPRESSIONS`.

    The graph is the run's (:attr:`timeline.run.Run.graph`, with its measured link).

    The world size and bucketing stay as measured; the link efficiency is ``observed`` when the
    measured link is known (a capture manifest), else ``full`` (the note says so). A trace with no
    graph (no rank with compute events: a Horovod timeline alone) gives no report and a note saying why.
    """
    graph, none = _graph_of(run)
    if graph is None:
        return none
    given = run.options.link_gbps is not None
    return joined_sweep(graph, [sweep_part((graph, given, BANDWIDTHS_GBPS))])


def submit_whatif_sweep(run: Run, helper: LocalExecutor) -> Future[WhatIfSweep]:
    """Replay :func:`whatif_sweep` of the run here and in a helper process at once; return its future.

    The run's graph is built here; the helper (:meth:`LocalExecutor.submit
    <timeline.executors.LocalExecutor.submit>`) replays the upper half of :data:`BANDWIDTHS_GBPS`
    while this process replays the lower half (:data:`SPLIT`), then goes on (the report prepares its
    other views meanwhile). The future's result is what :func:`whatif_sweep` returns, the same
    scenarios in the same order (:func:`joined_sweep`); an error of the sweep is raised by its
    ``result()``. Without a started helper the whole sweep runs here, now.
    """
    from concurrent.futures import Future

    result: Future[WhatIfSweep] = Future()
    graph, none = _graph_of(run)
    if graph is None:
        result.set_result(none)
        return result
    given = run.options.link_gbps is not None
    if not helper.started:
        result.set_result(joined_sweep(graph, [sweep_part((graph, given, BANDWIDTHS_GBPS))]))
        return result
    far = helper.submit(sweep_part, (graph, given, BANDWIDTHS_GBPS[SPLIT:]))
    near = sweep_part((graph, given, BANDWIDTHS_GBPS[:SPLIT]))

    def join(done: Future[WhatIfReport]) -> None:
        error = done.exception()
        if error is not None:
            result.set_exception(error)
        else:
            result.set_result(joined_sweep(graph, [near, done.result()]))

    far.add_done_callback(join)
    return result


SPLIT = 5
"""The bandwidths of :data:`BANDWIDTHS_GBPS` this process replays (the first five) when a helper
replays the rest: 15 and 12 of the 27 scenarios (:func:`submit_whatif_sweep`)."""


def _graph_of(run: Run) -> tuple[TraceGraph | None, WhatIfSweep]:
    """Return the run's what-if graph (None when it has none) and the sweep that says why it has none."""
    from timeline.errors import TimelineError

    try:
        return run.graph, WhatIfSweep(report=None, note="")
    except TimelineError as exc:
        return None, WhatIfSweep(report=None, note=f"no what-if prediction: {exc}")


def _efficiency(graph: TraceGraph) -> Efficiency:
    """Return the link efficiency of the sweep: ``observed`` when the graph's link is known, else ``full``."""
    from timeline.whatif.settings import choose_efficiency

    bandwidths: list[float | None] = list(BANDWIDTHS_GBPS)
    efficiency, _ = choose_efficiency(None, link_known=graph.link_gbps is not None, bandwidths=bandwidths)
    return efficiency


def sweep_part(item: tuple[TraceGraph, bool, Sequence[float]]) -> WhatIfReport:
    """Return the what-if report of a graph on some links, each at every ratio of :data:`COMPRESSIONS`.

    ``item``: the graph, whether its link was given (``--link-gbps``), the links (Gbit/s). A
    module-level function of one argument, so that a helper process can run it
    (:func:`submit_whatif_sweep`).
    """
    from timeline.results.whatif import build_whatif_report, link_source_of
    from timeline.whatif.settings import Settings

    graph, given, links = item
    settings = Settings(
        bandwidths=list(links), compressions=list(COMPRESSIONS), efficiency=_efficiency(graph)
    )
    return build_whatif_report(graph, settings, link_source=link_source_of(graph, given=given))


def joined_sweep(graph: TraceGraph, parts: Sequence[WhatIfReport]) -> WhatIfSweep:
    """Return the sweep of the reports of consecutive parts of :data:`BANDWIDTHS_GBPS`, and its note.

    The report is the first part's (its self-replay, notes and warnings are the same in every
    part: one graph) with the scenarios of every part, in order.
    """
    import msgspec

    report = msgspec.structs.replace(parts[0], scenarios=[row for part in parts for row in part.scenarios])
    efficiency = _efficiency(graph)
    link = "unknown" if graph.link_gbps is None else f"{graph.link_gbps:g} Gbit/s"
    note = (
        f"Predicted by replaying the trace's dependency graph at its world size ({graph.world_size}) "
        f"and bucketing, on links of {BANDWIDTHS_GBPS[0]:g} to {BANDWIDTHS_GBPS[-1]:g} Gbit/s, with "
        f"{' / '.join(f'{c:g}×' for c in COMPRESSIONS)} gradient compression (free codec). "
        f"Measured link: {link}; link efficiency: {efficiency}"
        + (" (the measured link is unknown: collectives get the full link)" if efficiency == "full" else "")
        + ". Dotted line: the trace's own scaling factor. More settings: timeline whatif."
    )
    return WhatIfSweep(report=report, note=note)


def build_whatif_panel(whatif: WhatIfSweep) -> Any:
    """Return the "What-if" tab's layout (``name="whatif"``): the plot and its note, or the note alone.

    The plot is :func:`build_whatif_view` (``name="whatif_plot"``), as wide as the window; the note
    a ``Div`` named ``whatif_note``, one line, then a ``note:`` line for each of the report's notes
    and a ``warning:`` line for each of its warnings, wrapped to the window's width.
    """
    from bokeh.layouts import column
    from bokeh.models.widgets import Div

    from timeline.report.layout import MIN_PLOT_WIDTH, STRETCH

    report = whatif.report
    notes = report.notes if report is not None else []
    warnings = report.warnings if report is not None else []
    lines = [whatif.note, *(f"note: {n}" for n in notes), *(f"warning: {w}" for w in warnings)]
    note = Div(text="<br>".join(html.escape(line) for line in lines), sizing_mode=STRETCH, name="whatif_note")
    if report is None or not report.scenarios:
        return column(note, sizing_mode=STRETCH, name="whatif")
    plot = build_whatif_view(report, height=520)
    plot.update(name="whatif_plot", sizing_mode=STRETCH, min_width=MIN_PLOT_WIDTH)
    return column(plot, note, sizing_mode=STRETCH, name="whatif")


_SETTING_COLUMNS = ("world_size", "compression", "buckets", "efficiency", "algorithm")
_COLOURS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)


def curve_label(row: ScenarioRow, varying: tuple[str, ...]) -> str:
    """Name a curve by the settings that vary across the sweep: ``N=64, 2× compression, ddp:25``.

    ``varying``: names of :data:`_SETTING_COLUMNS` (fields of the scenario row).
    """
    parts: list[str] = []
    for column in varying:
        value = getattr(row, column)
        if column == "world_size":
            parts.append(f"N={value}")
        elif column == "compression":
            parts.append("no compression" if value == 1 else f"{value:g}× compression")
        elif column == "efficiency":
            parts.append(f"efficiency {value}")
        else:
            parts.append(str(value))
    return ", ".join(parts) if parts else "predicted"


def build_whatif_view(
    report: WhatIfReport, *, title: str | None = None, width: int = 760, height: int = 420
) -> Any:
    """Return a bokeh figure of the predicted scaling factor against bandwidth, one curve per setting.

    Parameters
    ----------
    report
        The what-if report: its scenarios (those without a bandwidth are left out), the trace's own
        scaling factor (``self_replay.measured_scaling_factor``: a dotted line) and, with targets,
        the target scaling factor (a dashed line).
    title
        The figure's title; default: "Predicted scaling factor vs link bandwidth".
    width, height
        Pixels.

    Returns
    -------
    bokeh.plotting.figure
        Its line renderers are named ``curve-<k>``, the target and measured lines ``target`` and
        ``measured``; each curve's data source has columns ``bandwidth_gbps``, ``scaling_factor``,
        ``iteration_ms``, ``exposed_ms``, ``no_overlap_sf``, ``perfect_overlap_sf`` and ``label``.
    """
    from bokeh.models import Range1d
    from bokeh.plotting import figure

    rows = [row for row in report.scenarios if row.bandwidth_gbps is not None]
    plot = figure(
        title=title or "Predicted scaling factor vs link bandwidth",
        x_axis_type="log",
        x_axis_label="link bandwidth (Gbit/s, one direction)",
        y_axis_label="scaling factor (T_single / T_predicted)",
        y_range=Range1d(start=0, end=1.05),
        width=width,
        height=height,
        tools="pan,wheel_zoom,box_zoom,reset,save",
    )
    renderers, items = _draw_curves(plot, rows)
    measured = report.self_replay.measured_scaling_factor
    _draw_reference_lines(plot, items, report.target_scaling_factor, measured)
    _add_hover_and_legend(plot, renderers, items)
    return plot


def _curves(rows: list[ScenarioRow]) -> tuple[list[list[ScenarioRow]], tuple[str, ...]]:
    """Return the rows of each setting (in the order first seen), and the settings that vary among them."""
    curves: dict[tuple[object, ...], list[ScenarioRow]] = {}
    for row in rows:
        curves.setdefault(tuple(getattr(row, c) for c in _SETTING_COLUMNS), []).append(row)
    varying = tuple(c for i, c in enumerate(_SETTING_COLUMNS) if len({key[i] for key in curves}) > 1)
    return list(curves.values()), varying


def _draw_curves(plot: Any, rows: list[ScenarioRow]) -> tuple[list[Any], list[Any]]:
    """Draw one line and its points per setting, labelled by the settings that vary.

    Returns the line renderers (for the hover) and a legend item per curve.
    """
    from bokeh.models import ColumnDataSource
    from bokeh.models.annotations import LegendItem

    items: list[Any] = []
    renderers: list[Any] = []
    curves, varying = _curves(rows)
    for k, curve in enumerate(curves):
        points = sorted(curve, key=lambda row: row.bandwidth_gbps or 0.0)  # a line, left to right
        label = curve_label(points[0], varying)
        source = ColumnDataSource(
            {
                "bandwidth_gbps": [row.bandwidth_gbps for row in points],
                "scaling_factor": [row.scaling_factor for row in points],
                "iteration_ms": [row.iteration_ns / 1e6 for row in points],
                "exposed_ms": [row.exposed_comm_ns / 1e6 for row in points],
                "no_overlap_sf": [row.no_overlap_scaling_factor for row in points],
                "perfect_overlap_sf": [row.perfect_overlap_scaling_factor for row in points],
                "label": [label] * len(points),
            }
        )
        colour = _COLOURS[k % len(_COLOURS)]
        line = plot.line(
            "bandwidth_gbps", "scaling_factor", source=source, line_width=2, color=colour, name=f"curve-{k}"
        )
        dots = plot.scatter(
            "bandwidth_gbps", "scaling_factor", source=source, size=7, color=colour, name=f"points-{k}"
        )
        renderers.append(line)
        glyphs: list[Any] = [line, dots]
        items.append(LegendItem(label=label, renderers=glyphs))
    return renderers, items


def _draw_reference_lines(
    plot: Any, items: list[Any], target_scaling_factor: float | None, measured_scaling_factor: float | None
) -> None:
    """Draw the target (dashed) and measured (dotted) scaling factors as horizontal lines, when given.

    The target also gets a legend item in ``items``.
    """
    from bokeh.models.annotations import LegendItem, Span

    if target_scaling_factor is not None:
        plot.add_layout(
            Span(
                location=target_scaling_factor,
                dimension="width",
                line_dash="dashed",
                line_color="#444444",
                line_width=1.5,
                name="target",
            )
        )
        items.append(LegendItem(label=f"target {target_scaling_factor:g}"))
    if measured_scaling_factor is not None:
        plot.add_layout(
            Span(
                location=measured_scaling_factor,
                dimension="width",
                line_dash="dotted",
                line_color="#888888",
                line_width=1.5,
                name="measured",
            )
        )


def _add_hover_and_legend(plot: Any, renderers: list[Any], items: list[Any]) -> None:
    """Add the curves' hover tooltips, and a legend of the items that have renderers."""
    from bokeh.models import HoverTool
    from bokeh.models.annotations import Legend

    plot.add_tools(
        HoverTool(
            renderers=renderers,
            tooltips=[
                ("setting", "@label"),
                ("bandwidth", "@bandwidth_gbps{0.[00]} Gbit/s"),
                ("scaling factor", "@scaling_factor{0.000}"),
                ("iteration", "@iteration_ms{0.00} ms"),
                ("exposed comm", "@exposed_ms{0.00} ms"),
                ("no overlap SF", "@no_overlap_sf{0.000}"),
                ("perfect overlap SF", "@perfect_overlap_sf{0.000}"),
            ],
        )
    )
    legend_items = [item for item in items if item.renderers]
    if legend_items:
        # beside the plot, never over a curve
        plot.add_layout(Legend(items=legend_items, location="top_left", click_policy="hide"), "right")
