"""The analysis summary (:class:`timeline.results.summary.Summary`) as terminal tables.

The verdict and the top findings first (:mod:`timeline.render.terminal.findings`), then the tables
of ``timeline analyze``: per rank (its whole trace: a span of iterations), per iteration (or across
ranks when long: the summary's ``iterations_across_ranks``), the worst iteration, the top exposed
collectives, the communication per dimension; with ``--align`` the clock offsets, with
``--link-gbps`` the link utilisation. Every figure is one the summary holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from timeline.render.terminal.collectives import render_clock_offsets, render_utilisation
from timeline.render.terminal.tables import titled_table
from timeline.units import format_ns, format_ratio

if TYPE_CHECKING:
    from timeline.results.dimensions import DimensionSummary
    from timeline.results.summary import (
        IterationAcrossRanksRow,
        IterationRow,
        RankRow,
        Summary,
        TopCollectiveRow,
    )

__all__ = ["render_summary"]

_MAX_ITERATION_ROWS = 40


def _table(title: str, columns: list[str]) -> Table:
    return titled_table(title, columns, numeric_first=("rank",))


def _link_table(title: str, columns: list[str]) -> Table:
    """Return a table of the clock offsets or the link utilisation, as ``timeline collectives`` draws them."""
    return titled_table(title, columns, numeric_first=("rank", "#", "iteration", "batch"), no_wrap=True)


def _overlap_cells(row: RankRow | IterationRow, length: int) -> list[str]:
    """Return the figures of a rank's span or of one iteration's step (``length``: the span or the step)."""
    return [
        format_ns(length),
        format_ns(row.compute_ns),
        format_ns(row.comm_ns),
        format_ns(row.hidden_comm_ns),
        format_ns(row.exposed_comm_ns),
        format_ratio(row.exposed_comm_ratio),
        format_ratio(row.hidden_comm_ratio),
        format_ratio(row.idle_ratio),
    ]


def _gbps(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _headers(length: str) -> list[str]:
    """Return the headers of :func:`_overlap_cells`: ``length`` is ``step`` or ``span`` (a whole trace)."""
    return [
        length,
        "compute",
        "comm",
        "hidden",
        "exposed",
        f"exposed/{length}",
        "hidden/comm",
        f"idle/{length}",
    ]


def render_summary(summary: Summary, console: Console) -> None:
    """Print the summary as tables, with the worst iteration and rank called out.

    The verdict and the top findings come first, where the summary holds them; then the clock
    offsets and the link utilisation, where it holds them.
    """
    if summary.verdict is not None:
        from timeline.render.terminal.findings import render_findings

        render_findings(summary.verdict, summary.findings or [], console)
    _render_overlap(summary, console)
    dimensions = summary.dimensions
    if dimensions is not None and tuple(row.dimension for row in dimensions.totals) != ("world",):
        # the world alone is the per-rank table again
        _render_dimensions(dimensions, console)
    if summary.clock_offsets is not None:
        render_clock_offsets(summary.clock_offsets, console)
    if summary.utilisation is not None:
        render_utilisation(summary.utilisation, console)


def _render_overlap(summary: Summary, console: Console) -> None:
    """Print the overlap tables of the summary."""
    modes = sorted({r.mode for r in summary.ranks})
    files = len({f.path for f in summary.files})  # an Nsight Systems export holds several ranks
    console.print(
        f"[bold]timeline[/bold]: {files} file(s), {len(summary.ranks)} rank(s), "
        f"measured on {', '.join(modes) or 'nothing'}"
    )
    whole = [rank for rank, window in summary.windows.items() if window == "whole_trace"]
    if whole:
        console.print(
            f"no ProfilerStep#N in rank(s) {', '.join(whole)}: one whole-trace window each "
            "(capture with a torch.profiler schedule to get iterations)"
        )
    if "horovod" in modes:
        console.print(
            "horovod timeline: communication phases only, no compute events; exposed vs hidden needs the "
            "framework trace of the same run"
        )

    ranks = _table("Per rank (whole trace)", ["rank", "mode", *_headers("span")])
    for row in summary.ranks:
        ranks.add_row(str(row.rank), row.mode, *_overlap_cells(row, row.span_ns))
    console.print(ranks)

    iterations = summary.iterations
    if iterations and any(r.iteration is not None for r in iterations):
        if len(iterations) <= _MAX_ITERATION_ROWS:
            console.print(_iteration_table(iterations))
        else:
            console.print(_across_ranks_table(summary.iterations_across_ranks))
    _render_worst(summary.worst, console)
    _render_top(summary.top_collectives, console)


def _render_worst(worst: IterationRow | None, console: Console) -> None:
    """Print the rank-iteration with the most exposed communication."""
    if worst is not None and worst.exposed_comm_ns:
        where = f"rank {worst.rank}" + (
            f", iteration {worst.iteration}" if worst.iteration is not None else " (whole trace)"
        )
        console.print(
            f"[bold]worst[/bold]: {where}: {format_ns(worst.exposed_comm_ns)} of exposed communication, "
            f"{format_ratio(worst.exposed_comm_ratio)} of its {format_ns(worst.step_ns)} step"
        )
    elif worst is not None:
        console.print("[bold]worst[/bold]: no exposed communication: every collective ran under compute")


def _render_top(top: Sequence[TopCollectiveRow], console: Console) -> None:
    """Print the top exposed collectives."""
    if not top:
        return
    table = _table(
        "Top exposed collectives (all ranks)",
        ["collective", "group", "bytes", "calls", "ranks", "time", "exposed", "exposed/time"],
    )
    for row in top:
        table.add_row(
            row.collective,
            row.pg_name or "-",
            "-" if row.in_bytes is None else f"{row.in_bytes:,}",
            str(row.calls),
            str(row.ranks),
            format_ns(row.dur_ns),
            "unknown" if row.exposed_ns is None else format_ns(row.exposed_ns),
            "unknown" if row.exposed_ns is None else format_ratio(row.exposed_ratio),
        )
    console.print(table)
    if any(row.exposed_ns is None for row in top):
        console.print(
            "exposed unknown: a Horovod timeline has no compute events to hide communication under; "
            "load the PyTorch profiler trace of the writer rank (rank 0) with it"
        )


def _iteration_table(iterations: Sequence[IterationRow]) -> Table:
    """Every rank × iteration."""
    table = _table("Per iteration", ["rank", "iteration", *_headers("step")])
    for row in iterations:
        table.add_row(str(row.rank), str(row.iteration), *_overlap_cells(row, row.step_ns))
    return table


def _across_ranks_table(rows: Sequence[IterationAcrossRanksRow]) -> Table:
    """Per iteration across ranks (the summary's ``iterations_across_ranks``)."""
    table = _table(
        "Per iteration (across ranks)",
        ["iteration", "ranks", "step mean", "step max", "exposed mean", "exposed max", "worst rank"],
    )
    for row in rows:
        table.add_row(
            str(row.iteration),
            str(row.ranks),
            format_ns(row.step_mean_ns),
            format_ns(row.step_max_ns),
            format_ns(row.exposed_mean_ns),
            format_ns(row.exposed_max_ns),
            str(row.worst_rank),
        )
    return table


def _render_dimensions(dimensions: DimensionSummary, console: Console) -> None:
    """Print the communication per dimension: totals, then per iteration across ranks."""
    totals = _table(
        "Communication per dimension (all ranks and iterations)",
        [
            "dimension",
            "comm",
            "hidden",
            "exposed",
            "exposed alone",
            "exposed/iteration",
            "worst",
            "hidden/comm",
        ],
    )
    for row in dimensions.totals:
        totals.add_row(
            row.dimension,
            format_ns(row.comm_ns),
            format_ns(row.hidden_ns),
            format_ns(row.exposed_ns),
            format_ns(row.exclusive_exposed_ns),
            format_ns(row.mean_exposed_ns),
            format_ns(row.max_exposed_ns),
            format_ratio(row.hidden_comm_ratio),
        )
    console.print(totals)
    if len(dimensions.across_ranks) <= _MAX_ITERATION_ROWS:
        table = _table(
            "Communication per dimension and iteration (across ranks)",
            ["dimension", "iteration", "ranks", "hidden mean", "exposed mean", "exposed max", "worst rank"],
        )
        for per in dimensions.across_ranks:
            table.add_row(
                per.dimension,
                "-" if per.iteration is None else str(per.iteration),
                str(per.ranks),
                format_ns(per.hidden_mean_ns),
                format_ns(per.exposed_mean_ns),
                format_ns(per.exposed_max_ns),
                str(per.worst_rank),
            )
        console.print(table)
    if any(r.exclusive_exposed_ns < r.exposed_ns for r in dimensions.totals):
        console.print(
            "dimensions ran at once: their shared time counts in each one's exposed time ('exposed alone': "
            "when no other dimension ran); see docs/metrics.md"
        )
