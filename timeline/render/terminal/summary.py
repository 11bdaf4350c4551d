"""The analysis summary (:func:`timeline.results.summary.build_summary`) as terminal tables.

The verdict and the top findings first (:mod:`timeline.render.terminal.findings`), then the tables
of ``timeline analyze``: per rank, per iteration (or across ranks when long), the worst
iteration, the top exposed collectives; with ``--align`` the clock offsets, with ``--link-gbps`` the
link utilisation.
"""

from __future__ import annotations

from typing import Any

import polars as pl
from rich.console import Console

from timeline.render.terminal.layout import counted
from timeline.render.terminal.tables import Col, print_prose, print_table
from timeline.units import format_ns, format_ratio

__all__ = ["render_summary"]

_MAX_ITERATION_ROWS = 40


def _overlap_cells(row: dict[str, Any]) -> list[str]:
    return [
        format_ns(row["step_ns"]),
        format_ns(row["compute_ns"]),
        format_ns(row["comm_ns"]),
        format_ns(row["hidden_comm_ns"]),
        format_ns(row["exposed_comm_ns"]),
        format_ratio(row["exposed_comm_ratio"]),
        format_ratio(row["hidden_comm_ratio"]),
        format_ratio(row["idle_ratio"]),
    ]


_OVERLAP_COLUMNS = [
    Col("step"),
    Col("compute", drop=5),
    Col("comm", drop=4),
    Col("hidden", drop=6),
    Col("exposed"),
    Col("exposed/step"),
    Col("hidden/comm", drop=3),
    Col("idle/step", drop=2),
]
"""The overlap figures of a rank or an iteration; what matters least is left out first."""


def render_summary(summary: dict[str, Any], console: Console, *, verbose: bool = False) -> None:
    """Print the summary as tables fitted to the console, with the worst iteration and rank called out.

    The verdict and the top findings come first, where the summary holds them (their notes folded
    into one line unless ``verbose``); then the clock offsets and the link utilisation, where it
    holds them.
    """
    if summary.get("verdict") is not None:
        from timeline.render.terminal.findings import render_findings

        render_findings(summary["verdict"], summary.get("findings") or [], console, verbose=verbose)
    _render_overlap(summary, console)
    dimensions = summary.get("dimensions")
    if dimensions and [row["dimension"] for row in dimensions["totals"]] != ["world"]:
        # the world alone is the per-rank table again
        _render_dimensions(dimensions, console)
    if "clock_offsets" in summary or "utilisation" in summary:
        from timeline.render.terminal.collectives import render_clock_offsets, render_utilisation

        if "clock_offsets" in summary:
            render_clock_offsets(summary["clock_offsets"], console)
        if "utilisation" in summary:
            render_utilisation(summary["utilisation"], console)


def _render_overlap(summary: dict[str, Any], console: Console) -> None:
    """Print the overlap tables of the summary."""
    files = summary["files"]
    modes = sorted({r["mode"] for r in summary["ranks"]})
    print_prose(
        console,
        f"[bold]timeline[/bold]: {counted(len(files), 'file')}, {_ranks_measured(summary['ranks'])}, "
        f"measured on {', '.join(modes)}",
    )
    # a profiler trace without steps; a Horovod timeline never has any (its line below says what it lacks)
    kineto = {str(f["rank"]) for f in files if f["format"] != "horovod" and f["rank"] is not None}
    whole = [
        rank for rank, window in summary["windows"].items() if window == "whole_trace" and rank in kineto
    ]
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
    columns = [Col("rank"), Col("mode", justify="left", drop=7), *_OVERLAP_COLUMNS]
    rows = [[str(row["rank"]), row["mode"], *_overlap_cells(row)] for row in summary["ranks"]]
    print_table(console, "Per rank (whole trace)", columns, rows)

    iterations = summary["iterations"]
    if iterations and any(r["iteration"] is not None for r in iterations):
        _iteration_table(iterations, console)

    worst = summary["worst"]
    if worst is not None and worst["exposed_comm_ns"]:
        where = f"rank {worst['rank']}" + (
            f", iteration {worst['iteration']}" if worst["iteration"] is not None else " (whole trace)"
        )
        print_prose(
            console,
            f"[bold]worst[/bold]: {where}: {format_ns(worst['exposed_comm_ns'])} of exposed communication, "
            f"{format_ratio(worst['exposed_comm_ratio'])} of its {format_ns(worst['step_ns'])} step",
        )
    elif worst is not None:
        print_prose(
            console, "[bold]worst[/bold]: no exposed communication: every collective ran under compute"
        )

    _render_top(summary["top_collectives"], console)


def _render_top(top: list[dict[str, Any]], console: Console) -> None:
    """Print the top exposed collectives (``--top``), and why an exposed time is unknown."""
    if top:
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
                row["collective"],
                row["pg_name"] or "-",
                "-" if row["in_bytes"] is None else f"{row['in_bytes']:,}",
                str(row["calls"]),
                str(row["ranks"]),
                format_ns(row["dur_ns"]),
                "unknown" if row["exposed_ns"] is None else format_ns(row["exposed_ns"]),
                "unknown" if row["exposed_ns"] is None else format_ratio(row["exposed_ratio"]),
            ]
            for row in top
        ]
        print_table(console, "Top exposed collectives (all ranks)", columns, rows)
        if any(row["exposed_ns"] is None for row in top):
            print_prose(
                console,
                "exposed unknown: a Horovod timeline has no compute events to hide communication under; "
                "exposed vs hidden needs the framework's trace of the writer rank (rank 0) with it",
                markup=False,
            )


def _ranks_measured(ranks: list[dict[str, Any]]) -> str:
    """Say how many ranks were measured; a Horovod timeline's one rank is its writer, standing for all."""
    if len(ranks) == 1 and ranks[0]["mode"] == "horovod":
        return f"rank {ranks[0]['rank']} (the Horovod timeline's writer, standing for all the job's ranks)"
    return counted(len(ranks), "rank")


def _iteration_table(iterations: list[dict[str, Any]], console: Console) -> None:
    """Print every rank × iteration when that is short; else per iteration across ranks."""
    if len(iterations) <= _MAX_ITERATION_ROWS:
        columns = [Col("rank"), Col("iteration"), *_OVERLAP_COLUMNS]
        rows = [[str(row["rank"]), str(row["iteration"]), *_overlap_cells(row)] for row in iterations]
        print_table(console, "Per iteration", columns, rows)
        return
    frame = pl.DataFrame(iterations)
    per_iteration = (
        frame.group_by("iteration")
        .agg(
            ranks=pl.len(),
            step_mean=pl.col("step_ns").mean(),
            step_max=pl.col("step_ns").max(),
            exposed_mean=pl.col("exposed_comm_ns").mean(),
            exposed_max=pl.col("exposed_comm_ns").max(),
            worst_rank=pl.col("rank").sort_by("exposed_comm_ns", descending=True, nulls_last=True).first(),
        )
        .sort("iteration")
    )
    columns = [
        Col("iteration"),
        Col("ranks", drop=3),
        Col("step mean"),
        Col("step max", drop=2),
        Col("exposed mean"),
        Col("exposed max"),
        Col("worst rank", drop=1),
    ]
    rows = [
        [
            str(row["iteration"]),
            str(row["ranks"]),
            format_ns(None if row["step_mean"] is None else int(row["step_mean"])),
            format_ns(row["step_max"]),
            format_ns(None if row["exposed_mean"] is None else int(row["exposed_mean"])),
            format_ns(row["exposed_max"]),
            str(row["worst_rank"]),
        ]
        for row in per_iteration.iter_rows(named=True)
    ]
    print_table(console, "Per iteration (across ranks)", columns, rows)


def _render_dimensions(dimensions: dict[str, Any], console: Console) -> None:
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
            row["dimension"],
            format_ns(row["comm_ns"]),
            format_ns(row["hidden_ns"]),
            format_ns(row["exposed_ns"]),
            format_ns(row["exclusive_exposed_ns"]),
            format_ns(row["mean_exposed_ns"]),
            format_ns(row["max_exposed_ns"]),
            format_ratio(row["hidden_comm_ratio"]),
        ]
        for row in dimensions["totals"]
    ]
    print_table(console, "Communication per dimension (all ranks and iterations)", columns, rows)
    per_iteration = (
        pl.DataFrame(dimensions["rows"])
        .group_by("dimension", "iteration")
        .agg(
            ranks=pl.len(),
            exposed_mean=pl.col("exposed_ns").mean(),
            exposed_max=pl.col("exposed_ns").max(),
            worst_rank=pl.col("rank").sort_by("exposed_ns", "rank", descending=[True, False]).first(),
            hidden_mean=pl.col("hidden_ns").mean(),
        )
        .sort("dimension", "iteration", nulls_last=True)
    )
    if per_iteration.height <= _MAX_ITERATION_ROWS:
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
                row["dimension"],
                "-" if row["iteration"] is None else str(row["iteration"]),
                str(row["ranks"]),
                format_ns(row["hidden_mean"]),
                format_ns(row["exposed_mean"]),
                format_ns(row["exposed_max"]),
                str(row["worst_rank"]),
            ]
            for row in per_iteration.iter_rows(named=True)
        ]
        print_table(console, "Communication per dimension and iteration (across ranks)", columns, cells)
    if any(r["exclusive_exposed_ns"] < r["exposed_ns"] for r in dimensions["totals"]):
        print_prose(
            console,
            "dimensions ran at once: their shared time counts in each one's exposed time ('exposed alone': "
            "when no other dimension ran); see docs/metrics.md",
            markup=False,
        )
