"""The collectives views of the report: matched collectives, wait vs transfer per rank, wait heat map.

Takes the run's :class:`~timeline.results.collectives.CollectivesReport` (what ``timeline
collectives`` prints; every figure defined in ``docs/collectives.md``) and draws it, computing
nothing of its own: the table is its ``collectives``, the bars its ``wait_by_rank`` (the whole
trace) and ``wait_by_rank_iteration`` (one iteration), the heat map its ``wait_by_rank_iteration``.

- :func:`has_collectives`, :func:`wait_transfer_tables` and :func:`iteration_label`: which scopes
  the bars offer and their columns (times in ms), tested as data (no bokeh);
- bokeh builders (bokeh imported inside the functions, so importing this module costs nothing):
  :func:`build_collective_table`, :func:`build_wait_transfer`, :func:`build_wait_heatmap`, and
  :func:`build_collectives_section`, the section the dashboard appends below its views (None when
  there is nothing to show: fewer than two ranks or no matched collective).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl

    from timeline.results.collectives import CollectivesReport, RankIterationWait, RankWait

__all__ = [
    "ALL_ITERATIONS",
    "CollectivesSection",
    "build_collective_table",
    "build_collectives_section",
    "build_cost_table",
    "build_wait_heatmap",
    "build_wait_transfer",
    "has_collectives",
    "iteration_label",
    "scope_rows",
    "wait_transfer_tables",
]

ALL_ITERATIONS = "all"
"""The scope value of the wait-vs-transfer chart for the whole trace."""

_TRANSFER_COLOUR = "#4C78A8"
_WAIT_COLOUR = "#E45756"


def has_collectives(report: CollectivesReport | None) -> bool:
    """Return whether there is anything to show: matched collectives seen on at least two ranks."""
    return report is not None and bool(report.collectives) and len(report.wait_by_rank) >= 2


def iteration_label(iteration: int | None) -> str:
    """Name an iteration column: ``it 10``, or ``outside`` for collectives outside every window."""
    return "outside" if iteration is None else f"it {iteration}"


def scope_rows(
    report: CollectivesReport, *, iteration: int | str | None = ALL_ITERATIONS
) -> Sequence[RankWait | RankIterationWait]:
    """Return the rows of one scope of the bars: the whole trace, or one iteration's cells.

    ``iteration``: :data:`ALL_ITERATIONS` (``wait_by_rank``), an iteration number, or None (the
    collectives outside every iteration window): the cells of ``wait_by_rank_iteration`` of that
    iteration, one per rank.
    """
    if iteration == ALL_ITERATIONS:
        return report.wait_by_rank
    return [cell for cell in report.wait_by_rank_iteration if cell.iteration == iteration]


def _bar_columns(rows: Sequence[RankWait | RankIterationWait]) -> dict[str, list[Any]]:
    """Return the wait-vs-transfer source's columns (times in ms)."""
    return {
        "rank": [str(row.rank) for row in rows],
        "transfer_ms": [row.transfer_ns / 1e6 for row in rows],
        "wait_ms": [row.wait_ns / 1e6 for row in rows],
        "collectives": [row.collectives for row in rows],
    }


def wait_transfer_tables(report: CollectivesReport, views: pl.DataFrame) -> dict[str, dict[str, list[Any]]]:
    """Return the wait-vs-transfer source columns per scope: :data:`ALL_ITERATIONS` and each view id.

    ``views`` is :data:`~timeline.report.data.VIEWS_SCHEMA` (a view is one iteration; the
    ``whole_trace`` view, iteration null, holds the instances outside every ProfilerStep window).
    """
    tables = {ALL_ITERATIONS: _bar_columns(report.wait_by_rank)}
    for view, iteration in views.select("view", "iteration").iter_rows():
        tables[str(view)] = _bar_columns(scope_rows(report, iteration=iteration))
    return tables


def _fmt_ns(value: int | None) -> str:
    from timeline.report.data import format_ns

    return format_ns(value)


def build_collective_table(report: CollectivesReport) -> Any:
    """Return the logical collectives as an HTML table (a ``Div``, ``name="collective_match_table"``).

    The table scrolls inside its box, which is as wide as the window and at most 320 pixels tall.
    """
    from timeline.report.breakdown import _html_table
    from timeline.report.layout import html_box, scroll_box

    headers = [
        "#",
        "collective",
        "group",
        "iteration",
        "ranks",
        "bytes",
        "start skew",
        "end skew",
        "transfer",
        "max wait",
        "busbw (Gbit/s)",
        "last rank",
    ]
    rows = [
        [
            str(row.collective_id),
            row.collective or "unknown",
            row.group or "-",
            "-" if row.iteration is None else str(row.iteration),
            str(row.ranks),
            "-" if row.bytes is None else f"{row.bytes:,}",
            _fmt_ns(row.start_skew_ns),
            _fmt_ns(row.end_skew_ns),
            _fmt_ns(row.transfer_ns),
            _fmt_ns(row.max_wait_ns),
            "-" if row.busbw_gbps is None else f"{row.busbw_gbps:.2f}",
            "-" if row.last_rank is None else str(row.last_rank),
        ]
        for row in report.collectives
    ]
    return html_box(scroll_box(_html_table(headers, rows), max_height=320), name="collective_match_table")


def build_wait_transfer(
    report: CollectivesReport,
    *,
    iteration: int | str | None = ALL_ITERATIONS,
    height: int = 330,
) -> Any:
    """Return stacked bars per rank: summed transfer time under summed wait time (``name="wait_transfer"``).

    The plot is as wide as its box; its legend is above the bars, never over them.

    The source (``name="wait_transfer_bars"``) has columns ``rank`` (strings), ``transfer_ms``,
    ``wait_ms`` and ``collectives``; :func:`wait_transfer_tables` gives them per scope, for swapping.
    """
    from bokeh.models import ColumnDataSource, DataRange1d, FactorRange, HoverTool
    from bokeh.plotting import figure

    from timeline.report.layout import MIN_SIDE_WIDTH, STRETCH

    columns = _bar_columns(scope_rows(report, iteration=iteration))
    source = ColumnDataSource(columns, name="wait_transfer_bars")
    plot = figure(
        x_range=FactorRange(factors=[str(row.rank) for row in report.wait_by_rank]),
        y_range=DataRange1d(start=0),
        title="Time in collectives per rank: transfer vs wait",
        x_axis_label="rank",
        y_axis_label="ms",
        sizing_mode=STRETCH,
        min_width=MIN_SIDE_WIDTH,
        height=height,
        tools="save,reset",
        name="wait_transfer",
    )
    renderers: list[Any] = plot.vbar_stack(
        ["transfer_ms", "wait_ms"],
        x="rank",
        width=0.8,
        source=source,
        color=[_TRANSFER_COLOUR, _WAIT_COLOUR],
        legend_label=["transfer", "wait for other ranks"],
    )
    legend = plot.legend[0]
    plot.center.remove(legend)  # above the bars, outside the frame: never drawn over a bar
    legend.update(orientation="horizontal", location="top_left")
    plot.add_layout(legend, "above")
    plot.add_tools(
        HoverTool(
            renderers=renderers,
            tooltips=[
                ("rank", "@rank"),
                ("collectives", "@collectives"),
                ("transfer", "@transfer_ms{0.000} ms"),
                ("wait", "@wait_ms{0.000} ms"),
            ],
        )
    )
    return plot


def build_wait_heatmap(report: CollectivesReport, *, height: int = 330) -> Any:
    """Return the rank × iteration heat map of summed wait (``name="wait_heatmap"``).

    Its cells' source (``name="wait_heatmap_cells"``) has one row per cell of the report's
    ``wait_by_rank_iteration``: ``rank`` and ``label`` (strings), ``wait_ms``, ``collectives``,
    ``colour`` (the wait against the largest cell's).
    """
    from bokeh.models import ColumnDataSource, FactorRange, HoverTool
    from bokeh.palettes import Reds9
    from bokeh.plotting import figure

    from timeline.report.layout import MIN_SIDE_WIDTH, STRETCH

    cells = report.wait_by_rank_iteration
    top = max([cell.wait_ns for cell in cells] + [1])
    palette = list(reversed(Reds9))
    last = len(palette) - 1
    labels = [iteration_label(cell.iteration) for cell in cells]
    source = ColumnDataSource(
        {
            "rank": [str(cell.rank) for cell in cells],
            "label": labels,
            "wait_ms": [cell.wait_ns / 1e6 for cell in cells],
            "collectives": [cell.collectives for cell in cells],
            "colour": [palette[min(int(cell.wait_ns / top * last + 0.5), last)] for cell in cells],
        },
        name="wait_heatmap_cells",
    )
    plot = figure(
        x_range=FactorRange(factors=list(dict.fromkeys(labels))),
        y_range=FactorRange(factors=[str(row.rank) for row in reversed(report.wait_by_rank)]),
        title="Wait in collectives per rank × iteration",
        x_axis_label="iteration",
        y_axis_label="rank",
        sizing_mode=STRETCH,
        min_width=MIN_SIDE_WIDTH,
        height=height,
        tools="save",
        name="wait_heatmap",
    )
    cell = plot.rect(
        x="label", y="rank", width=1, height=1, source=source, fill_color="colour", line_color="white"
    )
    plot.add_tools(
        HoverTool(
            renderers=[cell],
            tooltips=[
                ("rank", "@rank"),
                ("iteration", "@label"),
                ("wait", "@wait_ms{0.000} ms"),
                ("collectives", "@collectives"),
            ],
        )
    )
    return plot


# The scope selector swaps the wait-vs-transfer bars; the iteration selector moves the scope.
_SCOPE_JS = "source.data = tables[scope.value];"
_FOLLOW_JS = "if (scope.value !== select.value) scope.value = select.value;"


@dataclass(frozen=True)
class CollectivesSection:
    """The collectives section of the dashboard and the models tests reach into."""

    layout: Any
    table: Any
    wait_transfer: Any
    heatmap: Any
    scope: Any
    costs: Any = None
    """The fixed cost and time per byte per collective kind and group (:func:`build_cost_table`)."""


def build_cost_table(report: CollectivesReport) -> Any:
    """Return the fixed cost per call and the time per byte of each collective kind per group (a ``Div``).

    The report's ``costs`` rows, as ``timeline collectives`` prints them.
    """
    from timeline.report.breakdown import _html_table
    from timeline.report.layout import html_box, scroll_box

    headers = [
        "collective",
        "group",
        "dimension",
        "ranks",
        "calls",
        "sizes",
        "α per call",
        "β (ns/byte)",
        "basis",
    ]
    rows = []
    for cost in report.costs:
        alpha, beta = cost.alpha_ns, cost.beta_ns_per_byte
        alpha_text = (
            "-" if alpha is None else f"{_fmt_ns(round(alpha))} ± {_fmt_ns(round(cost.alpha_se_ns or 0))}"
        )
        beta_text = "-" if beta is None else f"{beta:.3g} ± {cost.beta_se_ns_per_byte or 0:.2g}"
        cells = (cost.collective, cost.group or "-", cost.dimension or "-", str(cost.group_size))
        rows.append(
            [*cells, str(cost.calls), str(cost.sizes), alpha_text, beta_text, cost.basis.replace("_", " ")]
        )
    title = (
        "<b>What a call costs</b>: time = α + β × bytes × bus factor, fitted from the transfers "
        "(docs/collectives.md)"
    )
    return html_box(
        title + scroll_box(_html_table(headers, rows), max_height=320), name="collective_cost_table"
    )


def _scope_select(views: pl.DataFrame, view: int | None) -> tuple[Any, int | str | None]:
    """Return the scope selector of the bars (on ``view``, default the whole trace) and its iteration."""
    from bokeh.models.widgets import Select

    options: list[str | tuple[str, str]] = [(ALL_ITERATIONS, "whole trace (every iteration)")]
    options += [(str(v), str(label)) for v, label in views.select("view", "label").iter_rows()]
    scope = Select(
        title="Wait vs transfer over",
        value=ALL_ITERATIONS if view is None else str(view),
        options=options,
        width=420,
        name="collectives_scope",
    )
    first: int | str | None = ALL_ITERATIONS
    if view is not None:
        picked = [iteration for v, iteration in views.select("view", "iteration").iter_rows() if v == view]
        first = picked[0] if picked else None
    return scope, first


def _section_header(report: CollectivesReport) -> Any:
    """Return the section's header: how many logical collectives on how many ranks, then the warnings."""
    from bokeh.models.widgets import Div

    from timeline.report.layout import STRETCH

    counts = f"{len(report.collectives)} logical collectives on {len(report.wait_by_rank)} ranks"
    notes = "".join(f"<br>{html.escape(w)}" for w in report.warnings)
    return Div(
        text=f"<b>Collectives across ranks</b>: {counts} (definitions: docs/collectives.md){notes}",
        sizing_mode=STRETCH,
        name="collectives_header",
    )


def build_collectives_section(
    report: CollectivesReport | None,
    views: pl.DataFrame,
    *,
    select: Any = None,
    view: int | None = None,
) -> CollectivesSection | None:
    """Return the collectives section (table, wait vs transfer, wait heat map), or None.

    Parameters
    ----------
    report
        The run's collectives report; None or :func:`has_collectives` false: no section.
    views
        The report's views (:data:`~timeline.report.data.VIEWS_SCHEMA`): the scopes offered.
    select
        The dashboard's iteration selector: when given, choosing an iteration there moves the
        wait-vs-transfer scope to it (a ``CustomJS``: the same in the served and exported report).
    view
        The view to start on (default: the whole trace).

    The section is as wide as the window: the bars and the heat map side by side (one under the
    other in a narrow window), the table below them.
    """
    if report is None or not has_collectives(report):
        return None
    from bokeh.layouts import column
    from bokeh.models import CustomJS

    from timeline.report.layout import STRETCH, side_by_side

    scope, first = _scope_select(views, view)
    tables = wait_transfer_tables(report, views)
    bars = build_wait_transfer(report, iteration=first)
    source = bars.select_one({"name": "wait_transfer_bars"})
    scope.js_on_change(
        "value", CustomJS(args={"scope": scope, "source": source, "tables": tables}, code=_SCOPE_JS)
    )
    if select is not None:
        select.js_on_change("value", CustomJS(args={"scope": scope, "select": select}, code=_FOLLOW_JS))
    heatmap = build_wait_heatmap(report)
    table = build_collective_table(report)
    header = _section_header(report)
    costs = build_cost_table(report)
    layout = column(
        header,
        scope,
        side_by_side(bars, heatmap),
        table,
        costs,
        sizing_mode=STRETCH,
        name="collectives_section",
    )
    return CollectivesSection(
        layout=layout, table=table, wait_transfer=bars, heatmap=heatmap, scope=scope, costs=costs
    )
