"""The Flight Recorder report (:class:`timeline.results.flight_recorder.FlightReport`) in the terminal.

:func:`render_flight_verdict` prints what ``timeline analyze DUMPS…`` answers: the verdict, the
findings (cause, ranks, what happened, the fix), the root ranks and the groups that stopped.
:func:`render_flight_progress` prints what ``timeline collectives DUMPS…`` lists: every group
instance's state and each member's progress, in the report's ``order`` (most telling first). Every
figure is one of the report's attributes, never recomputed.
The findings are drawn by the renderer of every finding
(:func:`timeline.render.terminal.findings.render_observed_findings`), as ``timeline analyze`` draws
the diagnosis' findings of a profiler trace.
"""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from timeline.render.terminal.findings import format_ranks, render_observed_findings
from timeline.render.terminal.tables import titled_table

if TYPE_CHECKING:
    from timeline.results.flight_recorder import FlightMatches, FlightReport

__all__ = ["render_flight_progress", "render_flight_verdict"]

_STATE_STYLE = {
    "not_entered": "bold red",
    "not_completed": "bold red",
    "waiting": "yellow",
    "stalled": "yellow",
    "outstanding": "yellow",
    "stopped": "bold red",
}


def _styled(state: str) -> str:
    style = _STATE_STYLE.get(state)
    return f"[{style}]{state}[/{style}]" if style else state


def _wall_clock(ns: int | None) -> str:
    """Return a time of the dumps (ns since the epoch, by its host's clock) in UTC, to the millisecond."""
    if ns is None:
        return "-"
    from datetime import UTC, datetime

    stamp = datetime.fromtimestamp(ns // 1_000_000_000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
    return f"{stamp}.{ns % 1_000_000_000 // 1_000_000:03d} UTC"


def _seq(value: int | None) -> str:
    return "-" if value is None else f"#{value}"


def render_flight_verdict(report: FlightReport, console: Console) -> None:
    """Print the verdict and findings of the dumps, the roots and the groups that did not finish."""
    dumps = report.dumps
    versions = ", ".join(dumps.versions) or "unknown"
    timing = "on" if dumps.timing else "off (no start or duration times)"
    console.print(
        f"Flight Recorder dumps of {len(dumps.ranks)} ranks ({format_ranks(dumps.ranks)}), "
        f"version {versions}, {dumps.entries:,} entries, timing {timing}\n"
    )
    render_observed_findings(report.verdict.summary, report.findings, console)
    if report.roots:
        table = titled_table(
            "\nRanks the others wait on",
            ["rank", "stop", "groups stopped in", "ranks waiting on it", "stopped at"],
            numeric_first=("rank",),
            no_wrap=True,
        )
        for root in report.roots:
            at = _wall_clock(root.stopped_at_ns)
            table.add_row(str(root.rank), _styled(root.kind), str(root.groups), str(root.waited_on_by), at)
        console.print(table)
        if report.first_stop is not None and len(report.roots) > 1:
            console.print(f"first to stop: rank {report.first_stop}")
    _groups_table(report, console, stopped_only=True)
    if report.matches is not None:
        _matches(report.matches, console)


def _matches(matches: FlightMatches, console: Console) -> None:
    """Print how many of the dumps' collectives the profiler's trace holds, and those that disagree."""
    counts = (
        f"{matches.matched:,} of the dumps' {matches.entries:,} entries matched to the profiler's "
        f"{matches.trace_collectives:,} collectives (by rank, group and sequence number)"
    )
    differ = (
        f"{matches.different_collective:,} name another collective, {matches.different_bytes:,} another size"
    )
    console.print(f"\nProfiler traces and dumps: {counts}; {differ}")
    odd = [m for m in matches.rows if m.same_collective is False or m.same_bytes is False]
    if not odd:
        return
    table = titled_table(
        "Matched collectives that disagree",
        ["rank", "group", "seq", "dump", "profiler", "dump bytes", "profiler bytes"],
        numeric_first=("rank",),
        no_wrap=True,
    )
    for match in odd[:10]:
        table.add_row(
            str(match.rank),
            escape(match.pg_name),
            _seq(match.seq),
            escape(match.profiling_name or "-"),
            escape(match.trace_name or "-"),
            "-" if match.in_bytes is None else f"{match.in_bytes:,}",
            "-" if match.trace_in_bytes is None else f"{match.trace_in_bytes:,}",
        )
    console.print(table)


def _groups_table(
    report: FlightReport, console: Console, *, stopped_only: bool, limit: int | None = None
) -> None:
    """Print the group instances (with ``stopped_only``, those stopped or stalled) in the report's order."""
    groups = sorted(report.groups, key=attrgetter("order"))
    rows = [g for g in groups if not stopped_only or g.state in ("stopped", "stalled")]
    if not rows:
        return
    shown = rows if limit is None else rows[:limit]
    title = "\nGroups that did not finish" if stopped_only else "\nProcess groups"
    table = titled_table(
        title,
        [
            "group",
            "dimension",
            "ranks",
            "state",
            "at",
            "op",
            "not entered",
            "not completed",
            "waiting",
        ],
        numeric_first=(),
    )
    for column in (table.columns[1], table.columns[5]):  # long names: folded, never cut
        column.overflow = "fold"
    for group in shown:
        table.add_row(
            escape(group.group),
            escape(group.dimension or "-"),
            format_ranks(group.group_ranks) if group.group_ranks is not None else "unknown",
            _styled(group.state),
            _seq(group.stop_seq),
            escape(group.stop_op or "-"),
            format_ranks(group.not_entered),
            format_ranks(group.not_completed),
            format_ranks(group.waiting or group.stalled),
        )
    console.print(table)
    if len(rows) > len(shown):
        console.print(f"({len(rows) - len(shown)} more groups: --limit, or --json for all)")


def render_flight_progress(report: FlightReport, console: Console, *, limit: int) -> None:
    """Print every group instance's state, then each member's progress (in order), ``limit`` rows."""
    _groups_table(report, console, stopped_only=False, limit=limit)
    rows = sorted(report.progress, key=attrgetter("order"))
    table = titled_table(
        "\nProgress per group and rank (last enqueued, started, completed)",
        [
            "group",
            "rank",
            "state",
            "enqueued",
            "started",
            "completed",
            "outstanding",
            "stopped at",
            "op",
            "waits on",
        ],
        numeric_first=(),
        no_wrap=True,
    )
    for member in rows[:limit]:
        table.add_row(
            escape(member.group),
            str(member.rank),
            _styled(member.state),
            _seq(member.last_enqueued),
            _seq(member.last_started),
            _seq(member.last_completed),
            str(member.outstanding),
            _seq(member.stop_seq),
            escape(member.stop_op or "-"),
            format_ranks(member.waits_on) if member.waits_on else "-",
        )
    console.print(table)
    if len(rows) > limit:
        console.print(f"({len(rows) - limit} more rows: --limit, or --json for all)")
