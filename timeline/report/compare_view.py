"""The comparison view (the report's "Compare" tab, ``--compare BASE``): BASE against the report's run.

Takes the :class:`~timeline.results.diff.Diff` of ``timeline diff BASE NEW`` (NEW the report's run)
and lays it out, never recomputing a figure: per iteration position (paired as the diff pairs them)
two stacked bars, BASE's and the run's, of compute, exposed and hidden communication (each the
median over the run's ranks); below, the medians table with the change and whether it is beyond the
noise.

bokeh is imported inside the functions that draw, so importing this module costs nothing.
"""

from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from timeline.results.diff import Diff

__all__ = ["BAR_METRICS", "RUNS", "bar_columns", "build_compare_panel", "median_columns"]

BAR_METRICS = ("compute_ns", "exposed_comm_ns", "hidden_comm_ns")
"""The per-iteration times drawn as stacked bars, bottom to top."""
RUNS = ("base", "new")
"""The two bars of each position: BASE's, then the report's run's."""
_RUN_NAMES = {"base": "BASE", "new": "this run"}
_COLOURS = {"compute_ns": "#5B84B1", "exposed_comm_ns": "#D62728", "hidden_comm_ns": "#F3C6C2"}


def _ms(value: float | None) -> float:
    return math.nan if value is None else value / 1e6


def _columns(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[str, list[Any]]:
    """Return records as columns (every key, even without rows)."""
    return {key: [row[key] for row in rows] for key in keys}


_BAR_KEYS = (
    "x",
    "position",
    "run",
    "iteration",
    *(m.removesuffix("_ns") + "_ms" for m in (*BAR_METRICS, "step_ns")),
)
_MEDIAN_KEYS = (
    "metric",
    "figure",
    "base",
    "new",
    "delta",
    "relative",
    "noise",
    "significant",
    "base_text",
    "new_text",
    "change_text",
    "noise_text",
)


def bar_columns(diff: Diff) -> dict[str, list[Any]]:
    """Return the bars' columns: one row per iteration position and run, times in ms (NaN: no iteration).

    Columns: ``x`` (``(position, run name)``), ``position``, ``run`` (``base``/``new``),
    ``iteration`` (the run's iteration number; -1 when the run has none at that position), and
    ``compute_ms``, ``exposed_comm_ms``, ``hidden_comm_ms``, ``step_ms``.
    """
    rows = []
    for pair in diff.iterations:
        figures = dict(pair.metrics.figures())
        for run, iteration in zip(RUNS, (pair.base_iteration, pair.new_iteration), strict=True):
            times = {
                metric.removesuffix("_ns") + "_ms": _ms(
                    figures[metric].base if run == "base" else figures[metric].new
                )
                for metric in (*BAR_METRICS, "step_ns")
            }
            rows.append(
                {
                    "x": (str(pair.position), _RUN_NAMES[run]),
                    "position": pair.position,
                    "run": run,
                    "iteration": -1 if iteration is None else iteration,
                    **times,
                }
            )
    return _columns(rows, _BAR_KEYS)


def median_columns(diff: Diff) -> dict[str, list[Any]]:
    """Return the medians table's columns: one row per figure of the diff's ``summary``.

    Numbers as in the diff (ns, Gbit/s; NaN when unknown): ``base``, ``new``, ``delta``,
    ``relative``, ``noise``; ``significant`` (``yes``/``no``/``?``); and their texts as
    ``timeline diff`` prints them: ``figure``, ``base_text``, ``new_text``, ``change_text``,
    ``noise_text``.
    """
    from timeline.render.terminal.diff import (
        METRIC_NAMES,
        format_change,
        format_significance,
        format_value,
    )

    def number(value: float | None) -> float:
        return math.nan if value is None else float(value)

    rows = [
        {
            "metric": metric,
            "figure": METRIC_NAMES.get(metric, metric),
            "base": number(figure.base),
            "new": number(figure.new),
            "delta": number(figure.delta),
            "relative": number(figure.relative),
            "noise": number(figure.noise),
            "significant": format_significance(figure.significant),
            "base_text": format_value(metric, figure.base),
            "new_text": format_value(metric, figure.new),
            "change_text": format_change(metric, figure),
            "noise_text": format_value(metric, figure.noise),
        }
        for metric, figure in diff.summary.figures()
    ]
    return _columns(rows, _MEDIAN_KEYS)


def _bars_figure(diff: Diff) -> Any:
    """Draw two stacked bars per iteration position: BASE's and the run's times, with a hover."""
    from bokeh.models import ColumnDataSource, FactorRange, HoverTool
    from bokeh.plotting import figure

    from timeline.report.layout import MIN_PLOT_WIDTH, STRETCH

    columns = bar_columns(diff)
    source = ColumnDataSource(columns, name="compare_bars")
    plot = figure(
        x_range=FactorRange(*columns.get("x", [])),
        title="Per iteration position: BASE vs this run (median over ranks)",
        y_axis_label="time (ms)",
        sizing_mode=STRETCH,
        min_width=MIN_PLOT_WIDTH,
        height=420,
        tools="xpan,xwheel_zoom,box_zoom,reset,save",
        name="compare_plot",
    )
    names = {"compute_ns": "compute", "exposed_comm_ns": "exposed comm", "hidden_comm_ns": "hidden comm"}
    stackers = [m.removesuffix("_ns") + "_ms" for m in BAR_METRICS]
    renderers: list[Any] = plot.vbar_stack(
        stackers,
        x="x",
        width=0.85,
        source=source,
        color=[_COLOURS[m] for m in BAR_METRICS],
        legend_label=[names[m] for m in BAR_METRICS],
        name="compare_stack",
    )
    plot.add_tools(
        HoverTool(
            renderers=renderers,
            tooltips=[
                ("position / run", "@position / @run"),
                ("iteration", "@iteration"),
                ("step", "@step_ms{0.000} ms"),
                ("compute", "@compute_ms{0.000} ms"),
                ("exposed comm", "@exposed_comm_ms{0.000} ms"),
                ("hidden comm", "@hidden_comm_ms{0.000} ms"),
            ],
        )
    )
    plot.xaxis.major_label_orientation = 1.0
    legend = plot.legend[0]
    plot.center.remove(legend)  # above the bars, outside the frame: never drawn over a bar
    legend.update(orientation="horizontal", location="top_left")
    plot.add_layout(legend, "above")
    return plot


def build_compare_panel(diff: Diff) -> Any:
    """Return the "Compare" tab's layout (``name="compare"``): a note, the bars, the medians table.

    The note (``compare_note``) names both runs, how iterations are paired and the diff's warnings;
    the bars are :func:`bar_columns` (source ``compare_bars``, figure ``compare_plot``); the table a
    ``DataTable`` (``compare_medians_table``) of :func:`median_columns` (source ``compare_medians``).
    Everything is as wide as the window.
    """
    from bokeh.layouts import column
    from bokeh.models import ColumnDataSource
    from bokeh.models.widgets import DataTable, Div, TableColumn

    from timeline.render.terminal.diff import headline
    from timeline.report.layout import STRETCH

    lines = [
        f"BASE: {diff.base}; this run: {diff.new}",
        headline(diff) + " (as timeline diff BASE NEW)",
        f"beyond the noise: |change| > {diff.noise_k:g} × its standard error, from the spread of both "
        "runs' per-iteration values (docs/diff.md)",
        *(f"warning: {w}" for w in diff.warnings),
    ]
    note = Div(
        text="<br>".join(html.escape(line) for line in lines), sizing_mode=STRETCH, name="compare_note"
    )
    medians = ColumnDataSource(median_columns(diff), name="compare_medians")
    table = DataTable(
        source=medians,
        columns=[
            TableColumn(field="figure", title="median over iterations"),
            TableColumn(field="base_text", title="BASE"),
            TableColumn(field="new_text", title="this run"),
            TableColumn(field="change_text", title="change"),
            TableColumn(field="noise_text", title="noise"),
            TableColumn(field="significant", title="beyond noise"),
        ],
        sizing_mode=STRETCH,
        height=180,
        index_position=None,
        name="compare_medians_table",
    )
    return column(note, _bars_figure(diff), table, sizing_mode=STRETCH, name="compare")
