"""The comparison view (the report's "Compare" tab, ``--compare BASE``): BASE against the report's run.

Takes the result of :func:`timeline.results.diff.build_diff` (``timeline diff BASE NEW``, NEW the
report's run) and lays it out, never recomputing a figure: per iteration position (paired as the
diff pairs them) two stacked bars, BASE's and the run's, of compute, exposed and hidden
communication; below, the medians table with the change and whether it is beyond the noise.

bokeh is imported inside the functions that draw, so importing this module costs nothing.
"""

from __future__ import annotations

import html
import math
from typing import Any

__all__ = ["BAR_METRICS", "RUNS", "bar_columns", "build_compare_panel", "median_columns"]

BAR_METRICS = ("compute_ns", "exposed_comm_ns", "hidden_comm_ns")
"""The per-iteration times drawn as stacked bars, bottom to top."""
RUNS = ("base", "new")
"""The two bars of each position: BASE's, then the report's run's."""
_RUN_NAMES = {"base": "BASE", "new": "this run"}
_COLOURS = {"compute_ns": "#5B84B1", "exposed_comm_ns": "#D62728", "hidden_comm_ns": "#F3C6C2"}


def _ms(value: float | None) -> float:
    return math.nan if value is None else value / 1e6


def bar_columns(diff: dict[str, Any]) -> dict[str, list[Any]]:
    """Return the bars' columns: one row per iteration position and run, times in ms (NaN: no iteration).

    Columns: ``x`` (``(position, run name)``), ``position``, ``run`` (``base``/``new``),
    ``iteration`` (the run's iteration number; -1 when the run has none at that position), and
    ``compute_ms``, ``exposed_comm_ms``, ``hidden_comm_ms``, ``step_ms``.
    """
    out: dict[str, list[Any]] = {"x": [], "position": [], "run": [], "iteration": []}
    for metric in (*BAR_METRICS, "step_ns"):
        out[metric.removesuffix("_ns") + "_ms"] = []
    for row in diff["iterations"]:
        for run in RUNS:
            iteration = row[f"{run}_iteration"]
            out["x"].append((str(row["position"]), _RUN_NAMES[run]))
            out["position"].append(row["position"])
            out["run"].append(run)
            out["iteration"].append(-1 if iteration is None else iteration)
            for metric in (*BAR_METRICS, "step_ns"):
                out[metric.removesuffix("_ns") + "_ms"].append(_ms(row["metrics"][metric][run]))
    return out


def median_columns(diff: dict[str, Any]) -> dict[str, list[Any]]:
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

    out: dict[str, list[Any]] = {
        key: []
        for key in (
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
    }
    for metric, figure in diff["summary"].items():
        out["metric"].append(metric)
        out["figure"].append(METRIC_NAMES.get(metric, metric))
        for key in ("base", "new", "delta", "relative", "noise"):
            out[key].append(math.nan if figure[key] is None else float(figure[key]))
        out["significant"].append(format_significance(figure["significant"]))
        out["base_text"].append(format_value(metric, figure["base"]))
        out["new_text"].append(format_value(metric, figure["new"]))
        out["change_text"].append(format_change(metric, figure))
        out["noise_text"].append(format_value(metric, figure["noise"]))
    return out


def _bars_figure(diff: dict[str, Any]) -> Any:
    """Draw two stacked bars per iteration position: BASE's and the run's times, with a hover."""
    from bokeh.models import ColumnDataSource, FactorRange, HoverTool
    from bokeh.plotting import figure

    from timeline.report.layout import MIN_PLOT_WIDTH, STRETCH

    columns = bar_columns(diff)
    source = ColumnDataSource(columns, name="compare_bars")
    plot = figure(
        x_range=FactorRange(*columns["x"]),
        title="Per iteration position: BASE vs this run (mean over ranks)",
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


def build_compare_panel(diff: dict[str, Any]) -> Any:
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
        f"BASE: {diff['base']}; this run: {diff['new']}",
        headline(diff) + " (as timeline diff BASE NEW)",
        f"beyond the noise: |change| > {diff['noise_k']:g} × the pooled MAD of both runs' per-iteration "
        "values (docs/diff.md)",
        *(f"warning: {w}" for w in diff["warnings"]),
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
