"""Two runs compared (:class:`~timeline.results.diff.Diff`) as terminal tables.

Also the cell formats the markdown of ``timeline diff --markdown`` and the report's comparison share.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from timeline.render.terminal.tables import Col, print_prose, print_table
from timeline.results.diff import TIME_METRICS, Change, Diff
from timeline.units import format_ns

__all__ = [
    "METRIC_NAMES",
    "NOTE",
    "SIGNIFICANT_MARK",
    "figure_cells",
    "format_change",
    "format_delta",
    "format_relative",
    "format_significance",
    "format_value",
    "headline",
    "render_diff",
]

METRIC_NAMES = {
    "step_ns": "step time",
    "compute_ns": "compute",
    "exposed_comm_ns": "exposed comm",
    "hidden_comm_ns": "hidden comm",
    "busbw_gbps": "busbw",
}
"""The name each compared figure is shown under."""

SIGNIFICANT_MARK = "*"
NOTE = (
    "*: beyond the noise: |change| > {k:g} × its standard error, from the spread of both runs' "
    "per-iteration values (per-collective values for a collective's busbw)"
)


def format_value(metric: str, value: float | None) -> str:
    """Format one figure: a time (``12.35 ms``) or a bandwidth (``3.25 Gbit/s``); ``-`` when unknown."""
    if value is None:
        return "-"
    if metric.endswith("_gbps"):
        return f"{value:.2f} Gbit/s"
    return format_ns(value)


def format_delta(metric: str, value: float | None) -> str:
    """Format a change with its sign: ``+1.20 ms``, ``-0.35 Gbit/s``; ``-`` when unknown."""
    if value is None:
        return "-"
    return ("+" if value >= 0 else "-") + format_value(metric, abs(value))


def format_relative(value: float | None) -> str:
    """Format a relative change: ``+3.4%``; ``-`` when unknown."""
    return "-" if value is None else f"{100 * value:+.1f}%"


def format_significance(value: bool | None) -> str:
    """Say whether a change is beyond the noise: ``yes``, ``no``, ``?`` (too few iterations to tell)."""
    return "?" if value is None else ("yes" if value else "no")


def format_change(metric: str, figure: Change) -> str:
    """Format a change in one cell: ``+1.20 ms (+3.4%)``, marked when beyond the noise."""
    if figure.delta is None:
        return "-"
    text = format_delta(metric, figure.delta)
    if figure.relative is not None:
        text += f" ({format_relative(figure.relative)})"
    return text + (SIGNIFICANT_MARK if figure.significant else "")


def headline(diff: Diff) -> str:
    """Say how many iterations were paired, and which medians changed beyond the noise."""
    changed = [METRIC_NAMES[m] for m in diff.beyond_noise]
    verdict = "beyond the noise: " + ", ".join(changed) if changed else "no change beyond the noise"
    return f"{diff.paired} iteration(s) paired by position; {verdict}"


def figure_cells(metric: str, figure: Change) -> list[str]:
    """Return a figure's cells: base, new, change, change %, noise, beyond noise."""
    return [
        format_value(metric, figure.base),
        format_value(metric, figure.new),
        format_delta(metric, figure.delta),
        format_relative(figure.relative),
        format_value(metric, figure.noise),
        format_significance(figure.significant),
    ]


def render_diff(diff: Diff, console: Console) -> None:
    """Print two runs compared: the medians, then per iteration, per rank and per collective."""
    where = f"{escape(diff.base)} → {escape(diff.new)}"
    print_prose(console, f"[bold]timeline diff[/bold] {where}: {escape(headline(diff))}")
    columns = [
        Col("figure", justify="left"),
        Col("base"),
        Col("new"),
        Col("change"),
        Col("change %", drop=3),
        Col("noise", drop=2),
        Col("beyond noise", drop=1),
    ]
    figures = diff.summary.figures()
    rows = [[METRIC_NAMES[metric], *figure_cells(metric, figure)] for metric, figure in figures]
    print_table(console, "Median over iterations (of the median over ranks)", columns, rows)
    _render_iterations(diff, console)
    _render_ranks(diff, console)
    _render_collectives(diff, console)
    print_prose(console, NOTE.format(k=diff.noise_k), markup=False)


def _iteration(value: int | None) -> str:
    return "-" if value is None else str(value)


def _render_iterations(diff: Diff, console: Console) -> None:
    """Print each pair of iterations: the change of every figure."""
    names = list(METRIC_NAMES.values())
    columns = [
        Col("#"),
        Col("base iteration", drop=6),
        Col("new iteration", drop=7),
        *(Col(name, drop=0 if k == 0 else k) for k, name in enumerate(names)),
    ]
    rows = [
        [
            str(pair.position),
            _iteration(pair.base_iteration),
            _iteration(pair.new_iteration),
            *(format_change(m, figure) for m, figure in pair.metrics.figures()),
        ]
        for pair in diff.iterations
    ]
    title = "Per iteration (paired by position; median over ranks; change NEW - BASE)"
    print_table(console, title, columns, rows)


def _render_ranks(diff: Diff, console: Console) -> None:
    """Print each rank's change of its median per-iteration times."""
    if not diff.ranks:
        return
    columns = [
        Col("rank"),
        Col("iterations", drop=5),
        *(Col(METRIC_NAMES[m], drop=0 if k == 0 else k) for k, m in enumerate(TIME_METRICS)),
    ]
    rows = [
        [
            str(row.rank),
            f"{row.base_iterations} → {row.new_iterations}",
            *(format_change(m, figure) for m, figure in row.metrics.figures()),
        ]
        for row in diff.ranks
    ]
    print_table(console, "Per rank (median over its iterations; change NEW - BASE)", columns, rows)


def _render_collectives(diff: Diff, console: Console) -> None:
    """Print each kind of collective's median bus bandwidth."""
    if not diff.collectives:
        return
    columns = [
        Col("collective", justify="left"),
        Col("matched", drop=3),
        Col("base"),
        Col("new"),
        Col("change"),
        Col("change %", drop=2),
        Col("noise", drop=1),
        Col("beyond noise"),
    ]
    rows = [
        [
            row.collective,
            f"{row.base_collectives} → {row.new_collectives}",
            *figure_cells("busbw_gbps", row.busbw_gbps),
        ]
        for row in diff.collectives
    ]
    print_table(console, "Per collective (median busbw of the matched collectives)", columns, rows)
