"""The analysis summary (:class:`timeline.results.summary.Summary`) as terminal tables.

The verdict and the top findings first (:mod:`timeline.render.terminal.findings`), then the tables
of ``timeline analyze``, fitted to the console's width (:func:`~timeline.render.terminal.tables.print_table`):
per rank (its whole trace: a span of iterations), per iteration (or across ranks when long: the
summary's ``iterations_across_ranks``), the worst iteration, the top exposed collectives, the
communication per dimension; with ``--align`` the clock offsets, with ``--link-gbps`` the link
utilisation. Every figure is one the summary holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from rich.console import Console

from timeline.render.terminal.collectives import render_clock_offsets, render_utilisation
from timeline.render.terminal.layout import counted
from timeline.render.terminal.tables import Col, print_prose, print_table
from timeline.units import format_ns, format_ratio

if TYPE_CHECKING:
    from timeline.results.collectives import FileRow
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


def _overlap_columns(length: str) -> list[Col]:
    """Return the columns of :func:`_overlap_cells` (``length``: ``step``, or ``span`` for a whole trace).

    What matters least is left out first on a narrow console.
    """
    return [
        Col(length),
        Col("compute", drop=5),
        Col("comm", drop=4),
        Col("hidden", drop=6),
        Col("exposed"),
        Col(f"exposed/{length}"),
        Col("hidden/comm", drop=3),
        Col(f"idle/{length}", drop=2),
    ]


def render_summary(summary: Summary, console: Console, *, verbose: bool = False) -> None:
    """Print the summary as tables fitted to the console, with the worst iteration and rank called out.

    The verdict and the top findings come first, where the summary holds them (their notes folded
    into one line unless ``verbose``); then the clock offsets and the link utilisation, where it
    holds them.
    """
    if summary.verdict is not None:
        from timeline.render.terminal.findings import render_findings

        render_findings(summary.verdict, summary.findings or [], console, verbose=verbose)
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
    print_prose(
        console,
        f"[bold]timeline[/bold]: {counted(files, 'file')}, {_ranks_measured(summary.ranks)}, "
        f"measured on {', '.join(modes) or 'nothing'}",
    )
    whole = _whole_trace_ranks(summary.windows, summary.files)
    if whole:
        print_prose(
            console,
            f"no ProfilerStep#N in {'rank' if len(whole) == 1 else 'ranks'} {', '.join(whole)}: one "
            "whole-trace window each (capture with a torch.profiler schedule to get iterations)",
            markup=False,
        )
    if "horovod" in modes:
        print_prose(
            console,
            "horovod timeline: communication phases only, no compute events; exposed vs hidden needs the "
            "framework trace of the same run",
            markup=False,
        )
    columns = [Col("rank"), Col("mode", justify="left", drop=7), *_overlap_columns("span")]
    rows = [[str(row.rank), row.mode, *_overlap_cells(row, row.span_ns)] for row in summary.ranks]
    print_table(console, "Per rank (whole trace)", columns, rows)

    iterations = summary.iterations
    if iterations and any(r.iteration is not None for r in iterations):
        if len(iterations) <= _MAX_ITERATION_ROWS:
            _iteration_table(iterations, console)
        else:
            _across_ranks_table(summary.iterations_across_ranks, console)
    _render_worst(summary.worst, console)
    _render_top(summary.top_collectives, console)


def _whole_trace_ranks(windows: Mapping[str, str], files: Sequence[FileRow]) -> list[str]:
    """Return the profiler traces' ranks without steps (a Horovod timeline never has any: it is said)."""
    profiled = {str(f.rank) for f in files if f.format != "horovod" and f.rank is not None}
    return [rank for rank, window in windows.items() if window == "whole_trace" and rank in profiled]


def _ranks_measured(ranks: Sequence[RankRow]) -> str:
    """Say how many ranks were measured; a Horovod timeline's one rank is its writer, standing for all."""
    if len(ranks) == 1 and ranks[0].mode == "horovod":
        return f"rank {ranks[0].rank} (the Horovod timeline's writer, standing for all the job's ranks)"
    return counted(len(ranks), "rank")


def _render_worst(worst: IterationRow | None, console: Console) -> None:
    """Print the rank-iteration with the most exposed communication."""
    if worst is not None and worst.exposed_comm_ns:
        where = f"rank {worst.rank}" + (
            f", iteration {worst.iteration}" if worst.iteration is not None else " (whole trace)"
        )
        print_prose(
            console,
            f"[bold]worst[/bold]: {where}: {format_ns(worst.exposed_comm_ns)} of exposed communication, "
            f"{format_ratio(worst.exposed_comm_ratio)} of its {format_ns(worst.step_ns)} step",
        )
    elif worst is not None:
        print_prose(
            console, "[bold]worst[/bold]: no exposed communication: every collective ran under compute"
        )


def _render_top(top: Sequence[TopCollectiveRow], console: Console) -> None:
    """Print the top exposed collectives (``--top``), and why an exposed time is unknown."""
    if not top:
        return
    columns = [
        Col("collective", justify="left", abbreviate=True),
        Col("group", justify="left", drop=5, abbreviate=True),
        Col("bytes"),
        Col("calls", drop=3),
        Col("ranks", drop=4),
        Col("time", drop=2),
        Col("exposed"),
        Col("exposed/time", drop=1),
    ]
    rows = [
        [
            row.collective,
            row.pg_name or "-",
            "-" if row.in_bytes is None else f"{row.in_bytes:,}",
            str(row.calls),
            str(row.ranks),
            format_ns(row.dur_ns),
            "unknown" if row.exposed_ns is None else format_ns(row.exposed_ns),
            "unknown" if row.exposed_ns is None else format_ratio(row.exposed_ratio),
        ]
        for row in top
    ]
    print_table(console, "Top exposed collectives (all ranks)", columns, rows)
    if any(row.exposed_ns is None for row in top):
        print_prose(
            console,
            "exposed unknown: a Horovod timeline has no compute events to hide communication under; "
            "exposed vs hidden needs the framework's trace of the writer rank (rank 0) with it",
            markup=False,
        )


def _iteration_table(iterations: Sequence[IterationRow], console: Console) -> None:
    """Print every rank × iteration."""
    columns = [Col("rank"), Col("iteration"), *_overlap_columns("step")]
    rows = [[str(row.rank), str(row.iteration), *_overlap_cells(row, row.step_ns)] for row in iterations]
    print_table(console, "Per iteration", columns, rows)


def _across_ranks_table(rows: Sequence[IterationAcrossRanksRow], console: Console) -> None:
    """Print per iteration across ranks (the summary's ``iterations_across_ranks``)."""
    columns = [
        Col("iteration"),
        Col("ranks", drop=3),
        Col("step mean"),
        Col("step max", drop=2),
        Col("exposed mean"),
        Col("exposed max"),
        Col("worst rank", drop=1),
    ]
    cells = [
        [
            str(row.iteration),
            str(row.ranks),
            format_ns(row.step_mean_ns),
            format_ns(row.step_max_ns),
            format_ns(row.exposed_mean_ns),
            format_ns(row.exposed_max_ns),
            str(row.worst_rank),
        ]
        for row in rows
    ]
    print_table(console, "Per iteration (across ranks)", columns, cells)


def _render_dimensions(dimensions: DimensionSummary, console: Console) -> None:
    """Print the communication per dimension: totals, then per iteration across ranks."""
    columns = [
        Col("dimension", justify="left"),
        Col("comm", drop=4),
        Col("hidden", drop=5),
        Col("exposed"),
        Col("exposed alone", drop=2),
        Col("exposed/iteration"),
        Col("worst", drop=3),
        Col("hidden/comm", drop=1),
    ]
    rows = [
        [
            row.dimension,
            format_ns(row.comm_ns),
            format_ns(row.hidden_ns),
            format_ns(row.exposed_ns),
            format_ns(row.exclusive_exposed_ns),
            format_ns(row.mean_exposed_ns),
            format_ns(row.max_exposed_ns),
            format_ratio(row.hidden_comm_ratio),
        ]
        for row in dimensions.totals
    ]
    print_table(console, "Communication per dimension (all ranks and iterations)", columns, rows)
    if len(dimensions.across_ranks) <= _MAX_ITERATION_ROWS:
        columns = [
            Col("dimension", justify="left"),
            Col("iteration"),
            Col("ranks", drop=3),
            Col("hidden mean", drop=2),
            Col("exposed mean"),
            Col("exposed max"),
            Col("worst rank", drop=1),
        ]
        cells = [
            [
                per.dimension,
                "-" if per.iteration is None else str(per.iteration),
                str(per.ranks),
                format_ns(per.hidden_mean_ns),
                format_ns(per.exposed_mean_ns),
                format_ns(per.exposed_max_ns),
                str(per.worst_rank),
            ]
            for per in dimensions.across_ranks
        ]
        print_table(console, "Communication per dimension and iteration (across ranks)", columns, cells)
    if any(r.exclusive_exposed_ns < r.exposed_ns for r in dimensions.totals):
        print_prose(
            console,
            "dimensions ran at once: their shared time counts in each one's exposed time ('exposed alone': "
            "when no other dimension ran); see docs/metrics.md",
            markup=False,
        )
