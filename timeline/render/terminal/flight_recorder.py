"""The Flight Recorder report (:func:`timeline.results.flight_recorder.build_flight_report`) in the terminal.

:func:`render_flight_verdict` prints what ``timeline analyze DUMPS…`` answers: the verdict, the
findings (cause, ranks, what happened, the fix), the root ranks and the groups that stopped.
:func:`render_flight_progress` prints what ``timeline collectives DUMPS…`` lists: every group
instance's state and each member's progress. Every figure is one of the report's, never recomputed.
The findings are drawn by the renderer of every finding
(:func:`timeline.render.terminal.findings.render_observed_findings`), as ``timeline analyze`` draws
the diagnosis' findings of a profiler trace.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from timeline.render.terminal.findings import format_ranks, render_observed_findings
from timeline.render.terminal.tables import titled_table

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


def render_flight_verdict(report: dict[str, Any], console: Console) -> None:
    """Print the verdict and findings of the dumps, the roots and the groups that did not finish."""
    dumps = report["dumps"]
    versions = ", ".join(dumps["versions"]) or "unknown"
    timing = "on" if dumps["timing"] else "off (no start or duration times)"
    console.print(
        f"Flight Recorder dumps of {len(dumps['ranks'])} ranks ({format_ranks(dumps['ranks'])}), "
        f"version {versions}, {dumps['entries']:,} entries, timing {timing}\n"
    )
    import msgspec

    from timeline.results.findings import Finding

    # the report's findings are plain data until the Flight Recorder family types its report
    findings = msgspec.convert(report["findings"], list[Finding])
    render_observed_findings(report["verdict"]["summary"], findings, console)
    if report["roots"]:
        table = titled_table(
            "\nRanks the others wait on",
            ["rank", "stop", "groups stopped in", "ranks waiting on it", "stopped at"],
            numeric_first=("rank",),
            no_wrap=True,
        )
        for row in report["roots"]:
            at = _wall_clock(row["stopped_at_ns"])
            table.add_row(
                str(row["rank"]), _styled(row["kind"]), str(row["groups"]), str(row["waited_on_by"]), at
            )
        console.print(table)
        if report["first_stop"] is not None and len(report["roots"]) > 1:
            console.print(f"first to stop: rank {report['first_stop']}")
    _groups_table(report, console, stopped_only=True)
    if "matches" in report:
        _matches(report["matches"], console)


def _matches(matches: dict[str, Any], console: Console) -> None:
    """Print how many of the dumps' collectives the profiler's trace holds, and those that disagree."""
    counts = (
        f"{matches['matched']:,} of the dumps' {matches['entries']:,} entries matched to the profiler's "
        f"{matches['trace_collectives']:,} collectives (by rank, group and sequence number)"
    )
    other = matches["different_collective"]
    differ = f"{other:,} name another collective, {matches['different_bytes']:,} another size"
    console.print(f"\nProfiler traces and dumps: {counts}; {differ}")
    odd = [r for r in matches["rows"] if r["same_collective"] is False or r["same_bytes"] is False]
    if not odd:
        return
    table = titled_table(
        "Matched collectives that disagree",
        ["rank", "group", "seq", "dump", "profiler", "dump bytes", "profiler bytes"],
        numeric_first=("rank",),
        no_wrap=True,
    )
    for row in odd[:10]:
        table.add_row(
            str(row["rank"]),
            escape(row["pg_name"]),
            _seq(row["seq"]),
            escape(row["profiling_name"] or "-"),
            escape(row["trace_name"] or "-"),
            "-" if row["in_bytes"] is None else f"{row['in_bytes']:,}",
            "-" if row["trace_in_bytes"] is None else f"{row['trace_in_bytes']:,}",
        )
    console.print(table)


def _groups_table(
    report: dict[str, Any], console: Console, *, stopped_only: bool, limit: int | None = None
) -> None:
    """Print the group instances (with ``stopped_only``, those stopped or stalled), most telling first."""
    order = {"stopped": 0, "stalled": 1, "outstanding": 2, "unknown": 3, "idle": 4}
    rows = [r for r in report["groups"] if not stopped_only or r["state"] in ("stopped", "stalled")]
    rows.sort(
        key=lambda r: (order[r["state"]], r["stop_created_ns"] is None, r["stop_created_ns"] or 0, r["group"])
    )
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
    for row in shown:
        table.add_row(
            escape(row["group"]),
            escape(row["dimension"] or "-"),
            format_ranks(row["group_ranks"]) if row["group_ranks"] is not None else "unknown",
            _styled(row["state"]),
            _seq(row["stop_seq"]),
            escape(row["stop_op"] or "-"),
            format_ranks(row["not_entered"]),
            format_ranks(row["not_completed"]),
            format_ranks(row["waiting"] or row["stalled"]),
        )
    console.print(table)
    if len(rows) > len(shown):
        console.print(f"({len(rows) - len(shown)} more groups: --limit, or --json for all)")


def render_flight_progress(report: dict[str, Any], console: Console, *, limit: int) -> None:
    """Print every group instance's state, then each member's progress (not idle first), ``limit`` rows."""
    _groups_table(report, console, stopped_only=False, limit=limit)
    order = {"not_entered": 0, "not_completed": 0, "waiting": 1, "stalled": 2, "outstanding": 3}
    rows = sorted(report["progress"], key=lambda r: (order.get(r["state"], 4), r["group"], r["rank"]))
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
    for row in rows[:limit]:
        table.add_row(
            escape(row["group"]),
            str(row["rank"]),
            _styled(row["state"]),
            _seq(row["last_enqueued"]),
            _seq(row["last_started"]),
            _seq(row["last_completed"]),
            "-" if row["outstanding"] is None else str(row["outstanding"]),
            _seq(row["stop_seq"]),
            escape(row["stop_op"] or "-"),
            format_ranks(row["waits_on"]) if row["waits_on"] else "-",
        )
    console.print(table)
    if len(rows) > limit:
        console.print(f"({len(rows) - limit} more rows: --limit, or --json for all)")
