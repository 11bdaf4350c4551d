"""The collectives views of the report: matched collectives, wait vs transfer per rank, wait heat map.

Takes the :class:`~timeline.analysis.collectives.CollectiveMatch` of a trace (one row per logical
collective and one per logical collective × rank; every figure defined in ``docs/collectives.md``)
and gives, in two layers:

- pure polars preparation, tested as data (no bokeh):

  - :func:`collective_table`: one row per logical collective: name, bytes, start/end skew,
    transfer, max wait, bus bandwidth (Gbit/s), last rank;
  - :func:`wait_transfer_by_rank`: per rank, the sum of the transfer time and of the wait time of
    the collectives it took part in, over the trace or one iteration;
  - :func:`wait_heatmap`: the sum of ``wait_ns`` per rank × iteration, every cell present (0 where
    a rank waited for nothing); a collective instance's iteration is the iteration window of the
    overlap analysis holding its start on that rank;

- bokeh builders (bokeh imported inside the functions, so importing this module costs nothing):
  :func:`build_collective_table`, :func:`build_wait_transfer`, :func:`build_wait_heatmap`, and
  :func:`build_collectives_section`, the section the dashboard appends below its views (None when
  there is nothing to show: fewer than two ranks or no matched collective).
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any, cast

import polars as pl

from timeline.analysis.collectives import CollectiveMatch

__all__ = [
    "ALL_ITERATIONS",
    "HEATMAP_SCHEMA",
    "TABLE_SCHEMA",
    "WAIT_TRANSFER_SCHEMA",
    "CollectivesSection",
    "build_collective_table",
    "build_collectives_section",
    "build_wait_heatmap",
    "build_wait_transfer",
    "collective_table",
    "has_collectives",
    "iteration_label",
    "wait_heatmap",
    "wait_transfer_by_rank",
    "wait_transfer_tables",
]

ALL_ITERATIONS = "all"
"""The scope value of the wait-vs-transfer chart for the whole trace."""

TABLE_SCHEMA = pl.Schema(
    {
        "collective_id": pl.Int64(),
        "group": pl.String(),
        "collective": pl.String(),
        "iteration": pl.Int64(),
        "ranks": pl.Int32(),
        "bytes": pl.Int64(),
        "start_skew_ns": pl.Int64(),
        "end_skew_ns": pl.Int64(),
        "transfer_ns": pl.Int64(),
        "max_wait_ns": pl.Int64(),
        "busbw_gbps": pl.Float64(),
        "last_rank": pl.Int32(),
    }
)
"""One row per logical collective, sorted by ``collective_id`` (first start)."""

WAIT_TRANSFER_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32(),
        "collectives": pl.Int64(),
        "transfer_ns": pl.Int64(),
        "wait_ns": pl.Int64(),
    }
)
"""One row per rank: how many collectives it took part in, their summed transfer and wait."""

HEATMAP_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32(),
        "iteration": pl.Int64(),
        "label": pl.String(),
        "collectives": pl.Int64(),
        "wait_ns": pl.Int64(),
    }
)
"""One row per rank × iteration (null: outside every iteration window), every cell present."""

_TRANSFER_COLOUR = "#4C78A8"
_WAIT_COLOUR = "#E45756"


def has_collectives(match: CollectiveMatch | None) -> bool:
    """Return whether there is anything to show: matched collectives seen on at least two ranks."""
    if match is None or match.collectives.height == 0:
        return False
    return match.ranks.get_column("rank").n_unique() >= 2


def iteration_label(iteration: int | None) -> str:
    """Name an iteration column: ``it 10``, or ``outside`` for collectives outside every window."""
    return "outside" if iteration is None else f"it {iteration}"


def collective_table(match: CollectiveMatch) -> pl.DataFrame:
    """Return one row per logical collective (:data:`TABLE_SCHEMA`)."""
    return match.collectives.select(TABLE_SCHEMA.names()).cast(TABLE_SCHEMA).sort("collective_id")


def wait_transfer_by_rank(
    match: CollectiveMatch, *, iteration: int | str | None = ALL_ITERATIONS
) -> pl.DataFrame:
    """Return per rank the summed transfer and wait time of its collectives (:data:`WAIT_TRANSFER_SCHEMA`).

    Parameters
    ----------
    match
        The matched collectives.
    iteration
        :data:`ALL_ITERATIONS` (the whole trace), an iteration number, or None (the collectives
        outside every iteration window): the iteration window holding the rank's start.

    Every rank of the match has a row (zeros where it took part in nothing in that iteration); the
    sums over ranks equal the sums of :attr:`CollectiveMatch.ranks` (``transfer_ns`` is the
    collective's transfer, counted once per rank that took part).
    """
    rows = match.ranks
    if iteration is None:
        rows = rows.filter(pl.col("iteration").is_null())
    elif iteration != ALL_ITERATIONS:
        rows = rows.filter(pl.col("iteration") == iteration)
    ranks = match.ranks.select(pl.col("rank").unique().sort())
    sums = rows.group_by("rank").agg(
        collectives=pl.len().cast(pl.Int64),
        transfer_ns=pl.col("transfer_ns").sum(),
        wait_ns=pl.col("wait_ns").sum(),
    )
    out = ranks.join(sums, on="rank", how="left").with_columns(
        pl.col("collectives", "transfer_ns", "wait_ns").fill_null(0)
    )
    return out.select(WAIT_TRANSFER_SCHEMA.names()).cast(WAIT_TRANSFER_SCHEMA).sort("rank")


def wait_heatmap(match: CollectiveMatch, *, windows: pl.DataFrame | None = None) -> pl.DataFrame:
    """Return the wait of each rank in each iteration, every cell present (:data:`HEATMAP_SCHEMA`).

    Parameters
    ----------
    match
        The matched collectives (``ranks.iteration``: the iteration window of the overlap analysis
        holding the instance's start on that rank).
    windows
        The overlap analysis' iteration windows: their ``profiler_step`` iterations are columns even
        where no collective ran. The null iteration (instances outside every window) is a column
        only where some instance has it.

    Returns
    -------
    pl.DataFrame
        ``ranks × iterations`` rows, sorted by iteration (null last) and rank; ``wait_ns`` sums to
        the total wait of the match.
    """
    rows = match.ranks
    iterations = set(rows.get_column("iteration").drop_nulls().to_list())
    if windows is not None and windows.height:
        steps = windows.filter(pl.col("window") == "profiler_step").get_column("iteration").drop_nulls()
        iterations |= set(steps.to_list())
    columns: list[int | None] = sorted(iterations)
    if rows.get_column("iteration").is_null().any():
        columns.append(None)
    grid = match.ranks.select(pl.col("rank").unique().sort()).join(
        pl.DataFrame({"iteration": columns}, schema={"iteration": pl.Int64}), how="cross"
    )
    sums = rows.group_by("rank", "iteration").agg(
        collectives=pl.len().cast(pl.Int64), wait_ns=pl.col("wait_ns").sum()
    )
    out = (
        grid.join(sums, on=["rank", "iteration"], how="left", nulls_equal=True)
        .with_columns(
            pl.col("collectives", "wait_ns").fill_null(0),
            label=pl.when(pl.col("iteration").is_null())
            .then(pl.lit(iteration_label(None)))
            .otherwise(pl.lit("it ") + pl.col("iteration").cast(pl.String)),
        )
        .sort("iteration", "rank", nulls_last=True)
    )
    return out.select(HEATMAP_SCHEMA.names()).cast(HEATMAP_SCHEMA)


def _bar_columns(frame: pl.DataFrame) -> dict[str, list[Any]]:
    """Return the wait-vs-transfer source's columns (times in ms)."""
    return {
        "rank": [str(r) for r in frame.get_column("rank").to_list()],
        "transfer_ms": (frame.get_column("transfer_ns") / 1e6).to_list(),
        "wait_ms": (frame.get_column("wait_ns") / 1e6).to_list(),
        "collectives": frame.get_column("collectives").to_list(),
    }


def wait_transfer_tables(match: CollectiveMatch, views: pl.DataFrame) -> dict[str, dict[str, list[Any]]]:
    """Return the wait-vs-transfer source columns per scope: :data:`ALL_ITERATIONS` and each view id.

    ``views`` is :data:`~timeline.report.data.VIEWS_SCHEMA` (a view is one iteration; the
    ``whole_trace`` view, iteration null, holds the instances outside every ProfilerStep window).
    """
    tables = {ALL_ITERATIONS: _bar_columns(wait_transfer_by_rank(match))}
    for view, iteration in views.select("view", "iteration").iter_rows():
        tables[str(view)] = _bar_columns(wait_transfer_by_rank(match, iteration=iteration))
    return tables


def _fmt_ns(value: int | None) -> str:
    from timeline.report.data import format_ns

    return format_ns(value)


def build_collective_table(match: CollectiveMatch) -> Any:
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
            str(row["collective_id"]),
            row["collective"] or "unknown",
            row["group"],
            "-" if row["iteration"] is None else str(row["iteration"]),
            str(row["ranks"]),
            "-" if row["bytes"] is None else f"{row['bytes']:,}",
            _fmt_ns(row["start_skew_ns"]),
            _fmt_ns(row["end_skew_ns"]),
            _fmt_ns(row["transfer_ns"]),
            _fmt_ns(row["max_wait_ns"]),
            "-" if row["busbw_gbps"] is None else f"{row['busbw_gbps']:.2f}",
            "-" if row["last_rank"] is None else str(row["last_rank"]),
        ]
        for row in collective_table(match).iter_rows(named=True)
    ]
    text = scroll_box(_html_table(headers, rows), max_height=320)
    return html_box(text, name="collective_match_table")


def build_wait_transfer(
    match: CollectiveMatch,
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

    frame = wait_transfer_by_rank(match, iteration=iteration)
    source = ColumnDataSource(_bar_columns(frame), name="wait_transfer_bars")
    plot = figure(
        x_range=FactorRange(factors=[str(r) for r in frame.get_column("rank").to_list()]),
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


def build_wait_heatmap(
    match: CollectiveMatch, *, windows: pl.DataFrame | None = None, height: int = 330
) -> Any:
    """Return the rank × iteration heat map of summed wait (``name="wait_heatmap"``), as wide as its box.

    Its cells' source (``name="wait_heatmap_cells"``) has one row per cell of :func:`wait_heatmap`:
    ``rank`` and ``label`` (strings), ``wait_ms``, ``collectives``, ``colour``.
    """
    from bokeh.models import ColumnDataSource, FactorRange, HoverTool
    from bokeh.palettes import Reds9
    from bokeh.plotting import figure

    from timeline.report.layout import MIN_SIDE_WIDTH, STRETCH

    cells = wait_heatmap(match, windows=windows)
    top = max(cast("int | None", cells.get_column("wait_ns").max()) or 0, 1)
    palette = list(reversed(Reds9))
    colours = [
        palette[min(int(w / top * (len(palette) - 1) + 0.5), len(palette) - 1)] for w in cells["wait_ns"]
    ]
    source = ColumnDataSource(
        {
            "rank": [str(r) for r in cells.get_column("rank").to_list()],
            "label": cells.get_column("label").to_list(),
            "wait_ms": (cells.get_column("wait_ns") / 1e6).to_list(),
            "collectives": cells.get_column("collectives").to_list(),
            "colour": colours,
        },
        name="wait_heatmap_cells",
    )
    plot = figure(
        x_range=FactorRange(factors=cells.get_column("label").unique(maintain_order=True).to_list()),
        y_range=FactorRange(
            factors=[str(r) for r in reversed(cells.get_column("rank").unique().sort().to_list())]
        ),
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


def build_collectives_section(
    match: CollectiveMatch | None,
    views: pl.DataFrame,
    windows: pl.DataFrame | None,
    *,
    select: Any = None,
    view: int | None = None,
) -> CollectivesSection | None:
    """Return the collectives section (table, wait vs transfer, wait heat map), or None.

    Parameters
    ----------
    match
        The matched collectives; None or :func:`has_collectives` false: no section.
    views
        The report's views (:data:`~timeline.report.data.VIEWS_SCHEMA`): the scopes offered.
    windows
        The overlap analysis' iteration windows (the heat map's columns).
    select
        The dashboard's iteration selector: when given, choosing an iteration there moves the
        wait-vs-transfer scope to it (a ``CustomJS``: the same in the served and exported report).
    view
        The view to start on (default: the whole trace).

    The section is as wide as the window: the bars and the heat map side by side (one under the
    other in a narrow window), the table below them.
    """
    if match is None or not has_collectives(match):
        return None
    from bokeh.layouts import column
    from bokeh.models import CustomJS
    from bokeh.models.widgets import Div, Select

    from timeline.report.layout import STRETCH, side_by_side

    options: list[str | tuple[str, str]] = [(ALL_ITERATIONS, "whole trace (every iteration)")]
    options += [(str(v), str(label)) for v, label in views.select("view", "label").iter_rows()]
    scope = Select(
        title="Wait vs transfer over",
        value=ALL_ITERATIONS if view is None else str(view),
        options=options,
        width=420,
        name="collectives_scope",
    )
    tables = wait_transfer_tables(match, views)
    first: int | str | None = ALL_ITERATIONS
    if view is not None:
        picked = views.filter(pl.col("view") == view).get_column("iteration")
        first = cast("int | None", picked.first()) if picked.len() else None
    bars = build_wait_transfer(match, iteration=first)
    source = bars.select_one({"name": "wait_transfer_bars"})
    scope.js_on_change(
        "value", CustomJS(args={"scope": scope, "source": source, "tables": tables}, code=_SCOPE_JS)
    )
    if select is not None:
        select.js_on_change("value", CustomJS(args={"scope": scope, "select": select}, code=_FOLLOW_JS))
    heatmap = build_wait_heatmap(match, windows=windows)
    table = build_collective_table(match)
    counts = (
        f"{match.collectives.height} logical collectives on {match.ranks.get_column('rank').n_unique()} ranks"
    )
    notes = "".join(f"<br>{html.escape(w)}" for w in match.warnings)
    header = Div(
        text=f"<b>Collectives across ranks</b>: {counts} (definitions: docs/collectives.md){notes}",
        sizing_mode=STRETCH,
        name="collectives_header",
    )
    layout = column(
        header, scope, side_by_side(bars, heatmap), table, sizing_mode=STRETCH, name="collectives_section"
    )
    return CollectivesSection(layout=layout, table=table, wait_transfer=bars, heatmap=heatmap, scope=scope)
