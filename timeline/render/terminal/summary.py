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
from rich.table import Table

from timeline.render.terminal.tables import titled_table
from timeline.units import format_ns, format_ratio

__all__ = ["render_summary"]

_MAX_ITERATION_ROWS = 40


def _table(title: str, columns: list[str]) -> Table:
    return titled_table(title, columns, numeric_first=("rank",))


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


_OVERLAP_HEADERS = [
    "step",
    "compute",
    "comm",
    "hidden",
    "exposed",
    "exposed/step",
    "hidden/comm",
    "idle/step",
]


def render_summary(summary: dict[str, Any], console: Console) -> None:
    """Print the summary as tables, with the worst iteration and rank called out.

    The verdict and the top findings come first, where the summary holds them; then the clock
    offsets and the link utilisation, where it holds them.
    """
    if summary.get("verdict") is not None:
        from timeline.render.terminal.findings import render_findings

        render_findings(summary["verdict"], summary.get("findings") or [], console)
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
    console.print(
        f"[bold]timeline[/bold]: {len({f['path'] for f in files})} file(s), {len(summary['ranks'])} rank(s), "
        f"measured on {', '.join(modes) or 'nothing'}"
    )
    whole = [rank for rank, window in summary["windows"].items() if window == "whole_trace"]
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

    ranks = _table("Per rank (whole trace)", ["rank", "mode", *_OVERLAP_HEADERS])
    for row in summary["ranks"]:
        ranks.add_row(str(row["rank"]), row["mode"], *_overlap_cells(row))
    console.print(ranks)

    iterations = summary["iterations"]
    if iterations and any(r["iteration"] is not None for r in iterations):
        table = _iteration_table(iterations)
        console.print(table)

    worst = summary["worst"]
    if worst is not None and worst["exposed_comm_ns"]:
        where = f"rank {worst['rank']}" + (
            f", iteration {worst['iteration']}" if worst["iteration"] is not None else " (whole trace)"
        )
        console.print(
            f"[bold]worst[/bold]: {where}: {format_ns(worst['exposed_comm_ns'])} of exposed communication, "
            f"{format_ratio(worst['exposed_comm_ratio'])} of its {format_ns(worst['step_ns'])} step"
        )
    elif worst is not None:
        console.print("[bold]worst[/bold]: no exposed communication: every collective ran under compute")

    top = summary["top_collectives"]
    if top:
        table = _table(
            "Top exposed collectives (all ranks)",
            ["collective", "group", "bytes", "calls", "ranks", "time", "exposed", "exposed/time"],
        )
        for row in top:
            table.add_row(
                row["collective"],
                row["pg_name"] or "-",
                "-" if row["in_bytes"] is None else f"{row['in_bytes']:,}",
                str(row["calls"]),
                str(row["ranks"]),
                format_ns(row["dur_ns"]),
                "unknown" if row["exposed_ns"] is None else format_ns(row["exposed_ns"]),
                "unknown" if row["exposed_ns"] is None else format_ratio(row["exposed_ratio"]),
            )
        console.print(table)
        if any(row["exposed_ns"] is None for row in top):
            console.print(
                "exposed unknown: a Horovod timeline has no compute events to hide communication under; "
                "load the PyTorch profiler trace of the writer rank (rank 0) with it"
            )


def _iteration_table(iterations: list[dict[str, Any]]) -> Table:
    """Every rank × iteration when that is short; else per iteration across ranks."""
    if len(iterations) <= _MAX_ITERATION_ROWS:
        table = _table("Per iteration", ["rank", "iteration", *_OVERLAP_HEADERS])
        for row in iterations:
            table.add_row(str(row["rank"]), str(row["iteration"]), *_overlap_cells(row))
        return table
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
    table = _table(
        "Per iteration (across ranks)",
        ["iteration", "ranks", "step mean", "step max", "exposed mean", "exposed max", "worst rank"],
    )
    for row in per_iteration.iter_rows(named=True):
        table.add_row(
            str(row["iteration"]),
            str(row["ranks"]),
            format_ns(None if row["step_mean"] is None else int(row["step_mean"])),
            format_ns(row["step_max"]),
            format_ns(None if row["exposed_mean"] is None else int(row["exposed_mean"])),
            format_ns(row["exposed_max"]),
            str(row["worst_rank"]),
        )
    return table


def _render_dimensions(dimensions: dict[str, Any], console: Console) -> None:
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
    for row in dimensions["totals"]:
        totals.add_row(
            row["dimension"],
            format_ns(row["comm_ns"]),
            format_ns(row["hidden_ns"]),
            format_ns(row["exposed_ns"]),
            format_ns(row["exclusive_exposed_ns"]),
            format_ns(row["mean_exposed_ns"]),
            format_ns(row["max_exposed_ns"]),
            format_ratio(row["hidden_comm_ratio"]),
        )
    console.print(totals)
    rows = pl.DataFrame(dimensions["rows"])
    per_iteration = (
        rows.group_by("dimension", "iteration")
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
        table = _table(
            "Communication per dimension and iteration (across ranks)",
            ["dimension", "iteration", "ranks", "hidden mean", "exposed mean", "exposed max", "worst rank"],
        )
        for row in per_iteration.iter_rows(named=True):
            table.add_row(
                row["dimension"],
                "-" if row["iteration"] is None else str(row["iteration"]),
                str(row["ranks"]),
                format_ns(row["hidden_mean"]),
                format_ns(row["exposed_mean"]),
                format_ns(row["exposed_max"]),
                str(row["worst_rank"]),
            )
        console.print(table)
    if any(r["exclusive_exposed_ns"] < r["exposed_ns"] for r in dimensions["totals"]):
        console.print(
            "dimensions ran at once: their shared time counts in each one's exposed time ('exposed alone': "
            "when no other dimension ran); see docs/metrics.md"
        )
