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
from timeline.render.terminal.tables import Col, print_prose, print_table

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


def _spaced(names: str) -> str:
    """Return names joined by ``/`` or ``,`` with a space after each: it wraps between names."""
    return names.replace("/", "/ ").replace(",", ", ").replace("  ", " ")


def _seq(value: int | None) -> str:
    return "-" if value is None else f"#{value}"


def render_flight_verdict(report: FlightReport, console: Console, *, verbose: bool = False) -> None:
    """Print the verdict and findings of the dumps, the roots and the groups that did not finish.

    ``verbose``: every note of the verdict, not one line counting them.
    """
    dumps = report.dumps
    versions = ", ".join(dumps.versions) or "unknown"
    timing = "on" if dumps.timing else "off (no start or duration times)"
    print_prose(
        console,
        f"Flight Recorder dumps of {len(dumps.ranks)} ranks ({format_ranks(dumps.ranks)}), "
        f"version {versions}, {dumps.entries:,} entries, timing {timing}",
        markup=False,
    )
    console.print()
    render_observed_findings(report.verdict.summary, report.findings, console)
    if report.roots:
        columns = [
            Col("rank"),
            Col("stop", justify="left"),
            Col("groups stopped in"),
            Col("ranks waiting on it"),
            Col("stopped at (UTC)", drop=1),
        ]
        rows = [
            [
                str(root.rank),
                _styled(root.kind),
                str(root.groups),
                str(root.waited_on_by),
                _wall_clock(root.stopped_at_ns),
            ]
            for root in report.roots
        ]
        console.print()
        print_table(console, "Ranks the others wait on", columns, rows, markup=True)
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
    console.print()
    print_prose(console, f"Profiler traces and dumps: {counts}; {differ}", markup=False)
    odd = [m for m in matches.rows if m.same_collective is False or m.same_bytes is False]
    if not odd:
        return
    columns = [
        Col("rank"),
        Col("group", justify="left", wrap=True, abbreviate=True),
        Col("seq"),
        Col("dump", justify="left", wrap=True, abbreviate=True),
        Col("profiler", justify="left", wrap=True, abbreviate=True),
        Col("dump bytes", drop=2),
        Col("profiler bytes", drop=1),
    ]
    rows = [
        [
            str(match.rank),
            match.pg_name,
            _seq(match.seq),
            match.profiling_name or "-",
            match.trace_name or "-",
            "-" if match.in_bytes is None else f"{match.in_bytes:,}",
            "-" if match.trace_in_bytes is None else f"{match.trace_in_bytes:,}",
        ]
        for match in odd[:10]
    ]
    print_table(console, "Matched collectives that disagree", columns, rows)


def _groups_table(
    report: FlightReport, console: Console, *, stopped_only: bool, limit: int | None = None
) -> None:
    """Print the group instances (with ``stopped_only``, those stopped or stalled) in the report's order."""
    groups = sorted(report.groups, key=attrgetter("order"))
    rows = [g for g in groups if not stopped_only or g.state in ("stopped", "stalled")]
    if not rows:
        return
    shown = rows if limit is None else rows[:limit]
    title = "Groups that did not finish" if stopped_only else "Process groups"
    columns = [
        Col("group", justify="left", abbreviate=True),
        Col("dimension", justify="left", wrap=True, drop=4, abbreviate=True),
        Col("ranks", justify="left", wrap=True),
        Col("state", justify="left"),
        Col("at"),
        Col("op", justify="left", wrap=True, drop=3, abbreviate=True),
        Col("not entered", justify="left", wrap=True),
        Col("not completed", justify="left", wrap=True, drop=1),
        Col("waiting", justify="left", wrap=True, drop=2),
    ]
    cells = [
        [
            escape(group.group),
            escape(_spaced(group.dimension or "-")),
            format_ranks(group.group_ranks) if group.group_ranks is not None else "unknown",
            _styled(group.state),
            _seq(group.stop_seq),
            escape(group.stop_op or "-"),
            format_ranks(group.not_entered),
            format_ranks(group.not_completed),
            format_ranks(group.waiting or group.stalled),
        ]
        for group in shown
    ]
    console.print()
    print_table(console, title, columns, cells, markup=True)
    if len(rows) > len(shown):
        console.print(f"({len(rows) - len(shown)} more groups: --top, or --json for all)")


def render_flight_progress(report: FlightReport, console: Console, *, limit: int) -> None:
    """Print every group instance's state, then each member's progress (in order), ``limit`` rows."""
    _groups_table(report, console, stopped_only=False, limit=limit)
    rows = sorted(report.progress, key=attrgetter("order"))
    columns = [
        Col("group", justify="left", abbreviate=True),
        Col("rank"),
        Col("state", justify="left"),
        Col("enqueued", drop=3),
        Col("started", drop=2),
        Col("completed"),
        Col("outstanding", drop=4),
        Col("stopped at", drop=5),
        Col("op", justify="left", wrap=True, drop=6, abbreviate=True),
        Col("waits on", justify="left", wrap=True, drop=1),
    ]
    cells = [
        [
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
        ]
        for member in rows[:limit]
    ]
    console.print()
    title = "Progress per group and rank (last enqueued, started, completed)"
    print_table(console, title, columns, cells, markup=True)
    if len(rows) > limit:
        console.print(f"({len(rows) - limit} more rows: --top, or --json for all)")
