"""The what-if view: predicted scaling factor against link bandwidth, one curve per setting.

Takes the table of a what-if sweep (:data:`timeline.whatif.sweep.SWEEP_SCHEMA`, e.g. from
:func:`timeline.whatif.sweep.sweep` or the ``scenarios`` of ``timeline whatif --json``) and gives a
bokeh figure: x the link bandwidth (Gbit/s, log scale), y the predicted scaling factor
``T_single / T_predicted``, one line per combination of the other settings (world size,
compression, buckets, efficiency, algorithm), a hover with the predicted iteration time, exposed
communication and the no-overlap / perfect-overlap bounds, and, when given, a dashed line at the
target scaling factor ("what bandwidth or compression reaches X": where a curve crosses it).

bokeh is imported inside :func:`build_whatif_view`, so importing this module costs nothing.
"""

from __future__ import annotations

from typing import Any

import polars as pl

__all__ = ["build_whatif_view", "curve_label"]

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


def curve_label(row: dict[str, Any], varying: tuple[str, ...]) -> str:
    """Name a curve by the settings that vary across the sweep: ``N=64, 2× compression, ddp:25``.

    Examples
    --------
    >>> row = {"world_size": 64, "compression": 2.0, "buckets": "measured"}
    >>> curve_label(row, ("world_size", "compression"))
    'N=64, 2× compression'
    """
    parts: list[str] = []
    for column in varying:
        value = row.get(column)
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
    sweep: pl.DataFrame,
    *,
    target_scaling_factor: float | None = None,
    measured_scaling_factor: float | None = None,
    title: str | None = None,
    width: int = 760,
    height: int = 420,
) -> Any:
    """Return a bokeh figure of the predicted scaling factor against bandwidth, one curve per setting.

    Parameters
    ----------
    sweep
        Rows of :data:`timeline.whatif.sweep.SWEEP_SCHEMA` (rows without a bandwidth are left out).
    target_scaling_factor
        Draw a dashed horizontal line there.
    measured_scaling_factor
        Draw a dotted horizontal line at the trace's own scaling factor (its self-replay).
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

    rows = sweep.filter(pl.col("bandwidth_gbps").is_not_null() & pl.col("scaling_factor").is_not_null())
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
    _draw_reference_lines(plot, items, target_scaling_factor, measured_scaling_factor)
    _add_hover_and_legend(plot, renderers, items)
    return plot


def _draw_curves(plot: Any, rows: pl.DataFrame) -> tuple[list[Any], list[Any]]:
    """Draw one line and its points per setting, labelled by the settings that vary.

    Returns the line renderers (for the hover) and a legend item per curve.
    """
    from bokeh.models import ColumnDataSource
    from bokeh.models.annotations import LegendItem

    settings = [c for c in _SETTING_COLUMNS if c in rows.columns]
    varying = tuple(c for c in settings if rows.get_column(c).n_unique() > 1)
    items: list[Any] = []
    renderers: list[Any] = []
    groups = rows.partition_by(settings, maintain_order=True) if settings and rows.height else [rows]
    for k, group in enumerate(g for g in groups if g.height):
        group = group.sort("bandwidth_gbps")
        label = curve_label(group.row(0, named=True), varying)
        source = ColumnDataSource(
            {
                "bandwidth_gbps": group.get_column("bandwidth_gbps").to_list(),
                "scaling_factor": group.get_column("scaling_factor").to_list(),
                "iteration_ms": (group.get_column("iteration_ns") / 1e6).to_list(),
                "exposed_ms": (group.get_column("exposed_comm_ns") / 1e6).to_list(),
                "no_overlap_sf": group.get_column("no_overlap_scaling_factor").to_list(),
                "perfect_overlap_sf": group.get_column("perfect_overlap_scaling_factor").to_list(),
                "label": [label] * group.height,
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
        plot.add_layout(Legend(items=legend_items, location="bottom_right", click_policy="hide"))
