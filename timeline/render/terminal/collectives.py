"""The collectives report (:class:`~timeline.results.collectives.CollectivesReport`) as terminal tables.

Also the clock offsets and the link utilisation (:class:`~timeline.results.collectives.Utilisation`),
which ``timeline analyze`` prints too. Every figure is a field of the result: these functions read
attributes and format them, and choose the rows a table shows by the result's orders
(``collectives_by_wait``…).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console

from timeline.render.terminal.layout import counted
from timeline.render.terminal.tables import Col, print_prose, print_table
from timeline.units import format_ns, format_ratio

if TYPE_CHECKING:
    from timeline.results.collectives import (
        Ambiguity,
        ClockOffset,
        CollectivesReport,
        Group,
        Horovod,
        HorovodAttribution,
        HorovodBatch,
        HorovodNegotiation,
        HorovodTensor,
        Incomplete,
        Pair,
        StragglerIteration,
        Utilisation,
    )

__all__ = ["format_bytes", "render_clock_offsets", "render_collectives_report", "render_utilisation"]


def _name(header: str, drop: int = 0, *, wrap: bool = False) -> Col:
    """Return a column of names (left-aligned; a name too long for a narrow table is abbreviated)."""
    return Col(header, justify="left", drop=drop, wrap=wrap, abbreviate=True)


def format_bytes(value: float | None) -> str:
    """Format a byte count for people: ``1.5 MiB``; ``-`` when unknown."""
    if value is None:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.2f} GiB"  # pragma: no cover


def _gbps(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


_IMPLAUSIBLE_MARK = " !"
_IMPLAUSIBLE_NOTE = (
    "!: faster than the link (or, without --link-gbps, than any link: 7,200 Gbit/s): implausible, "
    "left out of the link utilisation"
)


def _busbw(busbw_gbps: float | None, implausible: bool) -> str:
    """Return the bus bandwidth of a collective or batch, marked when it is faster than physics."""
    return _gbps(busbw_gbps) + (_IMPLAUSIBLE_MARK if implausible else "")


def _matched_line(complete: int, total: int, incomplete: Sequence[Incomplete]) -> str:
    """Say how many collectives were matched on every rank of their group, and on how many the others."""
    if complete == total:
        return f"{complete} matched on every rank of their group"
    parts = [f"{complete} matched on every rank of their group"] if complete else []
    for row in incomplete:
        why = ": the other ranks' traces were not given" if row.untraced else ""
        parts.append(
            f"{row.collectives} matched on {row.ranks} of {row.expected_ranks} ranks of their group{why}"
        )
    return "; ".join(parts)


def _rank(value: int | None) -> str:
    return "-" if value is None else str(value)


def render_clock_offsets(offsets: Sequence[ClockOffset], console: Console) -> None:
    """Print the estimated clock offsets (``--align``)."""
    rows = [
        [str(row.rank), format_ns(row.offset_ns), str(row.collectives), format_ns(row.mad_ns)]
        for row in offsets
    ]
    print_table(
        console,
        f"Clock offsets (vs rank {_rank(offsets[0].reference_rank)})" if offsets else "Clock offsets",
        [Col("rank"), Col("offset"), Col("collectives", drop=2), Col("noise (MAD)", drop=1)],
        rows,
    )


def render_utilisation(utilisation: Utilisation, console: Console) -> None:
    """Print the per-iteration link utilisation (``--link-gbps``)."""
    link = utilisation.link_gbps
    rows = utilisation.iterations
    if rows:
        columns = [
            Col("iteration"),
            Col("collectives", drop=4),
            Col("bytes", drop=3),
            Col("transfer", drop=5),
            Col("busbw Gbit/s"),
            Col("busbw/link"),
            Col("bus bytes/step·link", drop=2),
            Col("exposed", drop=6),
            Col("link could carry", drop=1),
        ]
        cells = [
            [
                _rank(row.iteration),
                str(row.collectives),
                format_bytes(row.bytes),
                format_ns(row.transfer_ns),
                _gbps(row.busbw_gbps),
                format_ratio(row.link_utilisation_ratio),
                format_ratio(row.step_link_utilisation_ratio),
                format_ns(row.exposed_comm_ns),
                format_bytes(row.exposed_link_bytes),
            ]
            for row in rows
        ]
        print_table(
            console,
            f"Link utilisation against {link:g} Gbit/s (bus bandwidth of the matched collectives)",
            columns,
            cells,
        )
    horovod = utilisation.horovod
    if horovod is not None:
        print_prose(
            console,
            f"horovod: {format_bytes(horovod.bytes)} over {format_ns(horovod.wire_ns)} "
            f"of wire (union): busbw {_gbps(horovod.busbw_gbps)} Gbit/s = "
            f"{format_ratio(horovod.link_utilisation_ratio)} of {link:g} Gbit/s",
            markup=False,
        )


def render_collectives_report(report: CollectivesReport, console: Console, *, limit: int = 20) -> None:
    """Print the report of ``timeline collectives`` as tables fitted to the console (``limit``: rows each)."""
    if report.clock_offsets:
        render_clock_offsets(report.clock_offsets, console)
    if report.collectives or report.point_to_point or report.ambiguity:
        _render_collectives(report, console, limit=limit)
    if report.horovod is not None:
        _render_horovod(report.horovod, console, limit=limit, link=report.link_gbps)


def _render_collectives(report: CollectivesReport, console: Console, *, limit: int) -> None:
    """Print the groups, the collectives matched across ranks, the pairs, the stragglers and verdicts."""
    collectives = report.collectives
    headline = (
        f"[bold]timeline collectives[/bold]: {counted(len(collectives), 'logical collective')} in "
        f"{counted(report.collective_groups, 'group')} across {counted(len(report.ranks), 'rank')}"
    )
    if collectives:
        headline += f"; {_matched_line(report.complete_collectives, len(collectives), report.incomplete)}"
    pairs = report.point_to_point
    if pairs:
        headline += f"; {counted(len(pairs), 'send/receive pair')}"
    if report.ambiguous_events:
        ambiguous = report.ambiguous_events
        headline += f"; {ambiguous} collective(s) whose process group is ambiguous, matched across no rank"
    print_prose(console, headline)
    _render_groups(report.groups, console)
    _render_ambiguity(report.ambiguity, console)
    if collectives:
        _render_collective_table(report, console, limit=limit)
    _render_pairs(report, console, limit=limit)
    _render_stragglers(report, console, limit=limit)
    _render_iterations(report, console)


def _render_collective_table(report: CollectivesReport, console: Console, *, limit: int) -> None:
    """Print the logical collectives, those with the most wait first when they are too many."""
    collectives = report.collectives
    link = report.link_gbps
    shown = collectives
    title = "Collectives across ranks"
    if len(collectives) > limit:
        shown = [collectives[i] for i in report.collectives_by_wait[:limit]]
        title += f" (the {limit} with the most wait of {len(collectives)}; --top N or --json for all)"
    show_group = any(row.group is not None for row in collectives)
    show_dimension = any(row.dimension for row in collectives)
    columns = [
        Col("#", drop=9),
        *((_name("group", 7),) if show_group else ()),
        *((_name("dimension", 4),) if show_dimension else ()),
        _name("collective"),
        Col("iteration"),
        Col("ranks", drop=6),
        Col("bytes"),
        Col("start skew", drop=5),
        Col("end skew", drop=3),
        Col("transfer"),
        Col("max wait"),
        Col("last rank", drop=2),
        Col("busbw Gbit/s", drop=1),
    ]
    if link is not None:
        columns.append(Col("busbw/link", drop=8))
        title += f"; busbw/link against the {link:g} Gbit/s link"
    rows = []
    for row in shown:
        cells = [
            str(row.collective_id),
            *([row.group or "-"] if show_group else []),
            *([row.dimension or "-"] if show_dimension else []),
            row.collective or "-",
            _rank(row.iteration),
            f"{row.ranks}/{row.expected_ranks}",
            format_bytes(row.bytes),
            format_ns(row.start_skew_ns),
            format_ns(row.end_skew_ns),
            format_ns(row.transfer_ns),
            format_ns(row.max_wait_ns),
            _rank(row.last_rank),
            _busbw(row.busbw_gbps, row.implausible),
        ]
        if link is not None:
            cells.append(format_ratio(row.link_utilisation_ratio))
        rows.append(cells)
    print_table(console, title, columns, rows)
    if any(row.implausible for row in shown):
        print_prose(console, _IMPLAUSIBLE_NOTE, markup=False)


def _ranks_text(ranks: Sequence[int] | None, truncated: bool | None) -> str:
    """Write a rank list briefly: ``0-7``, ``0,2,4``, ``0,1,…`` when cut short; ``?`` when unknown."""
    if not ranks:
        return "?" if truncated else "-"
    if len(ranks) > 2 and list(ranks) == list(range(ranks[0], ranks[0] + len(ranks))):
        text = f"{ranks[0]}-{ranks[-1]}"
    else:
        text = ",".join(map(str, ranks))
    return text + (",…" if truncated else "")


def _nodes(spans: bool | None) -> str:
    return "-" if spans is None else ("inter-node" if spans else "intra-node")


def _render_groups(groups: Sequence[Group], console: Console) -> None:
    """Print the process group instances and what was matched on each (when the traces know groups)."""
    if not any(row.pg_name is not None for row in groups):
        return
    columns = [
        _name("group"),
        _name("dimension", 4),
        _name("description", 6, wrap=True),
        Col("size", drop=3),
        _name("ranks", wrap=True),
        _name("nodes", 7),
        Col("collectives", drop=2),
        _name("matched by", 8, wrap=True),
        _name("group known by", 9, wrap=True),
        Col("p2p pairs", drop=5),
        Col("ambiguous", drop=1),
    ]
    rows = [
        [
            row.group or "-",
            row.dimension or "-",
            row.pg_desc or "-",
            _rank(row.size),
            _ranks_text(row.ranks, row.ranks_truncated),
            _nodes(row.spans_nodes),
            f"{row.complete}/{row.collectives}" if row.collectives else "0",
            row.matched_by or "-",
            row.attributed_by or "-",
            str(row.point_to_point),
            str(row.ambiguous),
        ]
        for row in groups
    ]
    print_table(console, "Process groups", columns, rows)
    print_prose(
        console,
        "collectives: complete/matched; group known by: named (the trace names it), only_group, size, "
        "peer (the only group of the rank that fits), timing (the other groups' members had no instance "
        "at that moment), thread (its gloo thread's other collectives), pairing (the other groups' peers "
        "had no matching send or receive), none (no group known: one sequence per rank)",
        markup=False,
    )


def _render_ambiguity(ambiguity: Sequence[Ambiguity], console: Console) -> None:
    """Print the collectives whose group could not be told, by the groups they could be on."""
    if not ambiguity:
        return
    columns = [
        _name("could be on groups", wrap=True),
        _name("ambiguous"),
        _name("collective"),
        Col("events"),
        _name("ranks", 2, wrap=True),
        Col("size", drop=1),
    ]
    rows = [
        [
            ", ".join(row.candidates) or "none that fits",
            "place" if row.matched_by == "unordered" else "group",
            row.collective or "-",
            str(row.events),
            _ranks_text(row.ranks, False),
            ",".join(map(str, row.group_size)) if row.group_size else "-",
        ]
        for row in ambiguity
    ]
    title = (
        "Collectives matched across no rank: their process group, or their place in its order, is ambiguous"
    )
    print_table(console, title, columns, rows)


def _render_pairs(report: CollectivesReport, console: Console, *, limit: int) -> None:
    """Print the send/receive pairs, those with the most wait first when they are too many."""
    pairs, link = report.point_to_point, report.link_gbps
    if not pairs:
        return
    shown: Sequence[Pair] = pairs
    title = "Point-to-point: each send with its receive"
    if len(pairs) > limit:
        shown = [pairs[i] for i in report.pairs_by_wait[:limit]]
        title += f" (the {limit} with the most wait of {len(pairs)}; --top N or --json for all)"
    columns = [
        Col("#", drop=9),
        _name("group", 7),
        Col("send → recv"),
        Col("k", drop=6),
        Col("iteration"),
        Col("bytes"),
        Col("transfer"),
        Col("send wait"),
        Col("recv wait"),
        Col("recv − send start", drop=3),
        Col("busbw Gbit/s", drop=2),
        _name("nodes", 5),
    ]
    if link is not None:
        columns.append(Col("busbw/link", drop=4))
        title += f"; busbw/link against the {link:g} Gbit/s link"
    rows = []
    for row in shown:
        cells = [
            str(row.pair_id),
            row.group or "-",
            f"{row.src} → {row.dst}",
            str(row.index),
            _rank(row.iteration),
            format_bytes(row.bytes),
            format_ns(row.transfer_ns),
            format_ns(row.send_wait_ns),
            format_ns(row.recv_wait_ns),
            format_ns(row.start_skew_ns),
            _busbw(row.busbw_gbps, row.implausible),
            _nodes(row.spans_nodes),
        ]
        if link is not None:
            cells.append(format_ratio(row.link_utilisation_ratio))
        rows.append(cells)
    print_table(console, title, columns, rows)


def _render_stragglers(report: CollectivesReport, console: Console, *, limit: int) -> None:
    """Print who everyone waits for."""
    ranking = report.stragglers.ranks
    if ranking:
        columns = [
            Col("rank"),
            Col("times last"),
            Col("wait caused"),
            Col("share of wait"),
            Col("own wait", drop=2),
            Col("mean arrival lag", drop=1),
        ]
        rows = [
            [
                str(row.rank),
                str(row.times_last),
                format_ns(row.caused_wait_ns),
                format_ratio(row.caused_wait_ratio),
                format_ns(row.waited_ns),
                format_ns(row.mean_arrival_lag_ns),
            ]
            for row in ranking[:limit]
        ]
        print_table(console, "Who everyone waits for (synchronising collectives, whole trace)", columns, rows)


def _iteration_cells(row: StragglerIteration, report: CollectivesReport) -> list[str]:
    """Return one row of the per-iteration table: the stragglers, then the iteration's utilisation."""
    util = next((u for u in report.utilisation if u.iteration == row.iteration), None)
    cells = [
        _rank(row.iteration),
        _rank(row.straggler_rank),
        format_ns(row.straggler_caused_wait_ns),
        format_ratio(row.straggler_share_ratio),
        format_ns(row.mean_wait_ns),
        format_ns(row.transfer_ns),
        (row.verdict or "-").replace("_", " "),
        _gbps(None if util is None else util.busbw_gbps),
    ]
    if report.link_gbps is not None:
        cells += [
            format_ratio(None if util is None else util.link_utilisation_ratio),
            format_ns(None if util is None else util.exposed_comm_ns),
            format_bytes(None if util is None else util.exposed_link_bytes),
        ]
    return cells


def _render_iterations(report: CollectivesReport, console: Console) -> None:
    """Print the stragglers, the verdict and the link utilisation per iteration."""
    per_iteration = report.stragglers.iterations
    if per_iteration:
        columns = [
            Col("iteration"),
            Col("straggler"),
            Col("wait caused", drop=4),
            Col("share of wait", drop=5),
            Col("mean wait"),
            Col("transfer", drop=6),
            _name("verdict"),
            Col("busbw Gbit/s", drop=3),
        ]
        if report.link_gbps is not None:
            columns += [Col("busbw/link", drop=7), Col("exposed", drop=2), Col("link could carry", drop=1)]
        rows = [_iteration_cells(row, report) for row in per_iteration]
        link = report.link_gbps
        title = "Per iteration" + ("" if link is None else f" (busbw/link against the {link:g} Gbit/s link)")
        print_table(console, title, columns, rows)
        print_prose(
            console,
            "verdict: [bold]slow rank[/bold] = one rank arrives late and causes most of the wait "
            "(compare its compute); [bold]imbalance[/bold] = ranks arrive late by turns; "
            "[bold]slow link[/bold] = the transfer itself dominates (compare busbw with --link-gbps)",
        )


def _render_horovod(horovod: Horovod, console: Console, *, limit: int, link: float | None) -> None:
    """Print the Horovod timeline's totals, batches, tensors, negotiation and attribution."""
    totals = horovod.totals
    print_prose(
        console,
        f"[bold]horovod timeline[/bold]: {counted(totals.tensors, 'tensor')}, "
        f"{counted(totals.operations, 'operation')} in "
        f"{counted(totals.batches, 'fused batch', plural='fused batches')}, "
        f"world size {_rank(totals.world_size)} (the writer's timeline records every rank's phases)",
    )
    left_out = horovod.implausible_batches
    print_prose(
        console,
        f"wire time {format_ns(totals.wire_ns)} (union over fused tensors; the sum over tensors would say "
        f"{format_ns(totals.wire_sum_ns)}) = {format_ratio(totals.wire_ratio)} of the "
        f"{format_ns(totals.span_ns)} timeline; {format_bytes(totals.bytes)} moved at algbw "
        f"{_gbps(totals.algbw_gbps)} / busbw {_gbps(totals.busbw_gbps)} Gbit/s"
        + ("" if link is None else f" = {format_ratio(totals.link_utilisation_ratio)} of {link:g} Gbit/s")
        + (f" (without the {left_out} fused batch(es) faster than physics: !)" if left_out else ""),
        markup=False,
    )
    batches = horovod.batches
    _render_batches([batches[i] for i in horovod.batches_by_bytes[:limit]], len(batches), console, link=link)
    tensors = horovod.tensors
    _render_tensors([tensors[i] for i in horovod.tensors_by_time[:limit]], len(tensors), console)
    negotiation = horovod.negotiation
    _render_negotiation([negotiation[i] for i in horovod.negotiation_by_caused_wait[:limit]], console)
    _render_attribution(horovod.attribution, console)
    for line in horovod.limitations:
        print_prose(console, f"needs more than the timeline: {line}", markup=False)


def _render_batches(
    shown: Sequence[HorovodBatch], total: int, console: Console, *, link: float | None
) -> None:
    """Print the largest fused batches and their bandwidth (``shown``: the largest, of ``total``)."""
    if shown:
        columns = [
            Col("batch"),
            _name("collective"),
            Col("tensors", drop=3),
            Col("bytes"),
            Col("wire"),
            Col("algbw Gbit/s", drop=2),
            Col("busbw Gbit/s"),
        ]
        if link is not None:
            columns.append(Col("busbw/link", drop=1))
        against = "" if link is None else f"; busbw/link against the {link:g} Gbit/s link"
        rows = []
        for row in shown:
            cells = [
                str(row.batch),
                row.collective or "-",
                str(row.tensors),
                format_bytes(row.bytes),
                format_ns(row.wire_ns),
                _gbps(row.algbw_gbps),
                _busbw(row.busbw_gbps, row.implausible),
            ]
            if link is not None:
                cells.append(format_ratio(row.link_utilisation_ratio))
            rows.append(cells)
        print_table(console, f"Fused batches (the {len(shown)} largest of {total}{against})", columns, rows)
        if any(row.implausible for row in shown):
            print_prose(console, _IMPLAUSIBLE_NOTE, markup=False)


def _render_tensors(shown: Sequence[HorovodTensor], total: int, console: Console) -> None:
    """Print each tensor's phases (``shown``: those with the most wire and negotiation time, of ``total``)."""
    if shown:
        columns = [
            _name("tensor"),
            Col("ops", drop=6),
            Col("bytes", drop=5),
            Col("negotiation"),
            Col("wait", drop=4),
            Col("queue", drop=3),
            Col("memcpy in", drop=2),
            Col("wire"),
            Col("memcpy out", drop=1),
            Col("other", drop=7),
        ]
        rows = [
            [
                row.tensor or f"pid {row.pid}",
                str(row.operations),
                format_bytes(row.bytes),
                format_ns(row.negotiation_ns),
                format_ns(row.wait_ns),
                format_ns(row.queue_ns),
                format_ns(row.memcpy_in_ns),
                format_ns(row.wire_ns),
                format_ns(row.memcpy_out_ns),
                format_ns(row.other_ns),
            ]
            for row in shown
        ]
        title = f"Per-tensor phases (the {len(shown)} with the most wire + negotiation of {total})"
        print_table(console, title, columns, rows)


def _render_negotiation(shown: Sequence[HorovodNegotiation], console: Console) -> None:
    """Print the negotiation wait per rank (``shown``: the ranks that caused the most wait first)."""
    if shown:
        columns = [
            Col("rank"),
            Col("negotiations", drop=3),
            Col("waited"),
            Col("mean waited", drop=2),
            Col("times last", drop=1),
            Col("wait caused"),
        ]
        rows = [
            [
                str(row.rank),
                str(row.negotiations),
                format_ns(row.waited_ns),
                format_ns(row.mean_waited_ns),
                str(row.times_last),
                format_ns(row.caused_wait_ns),
            ]
            for row in shown
        ]
        print_table(console, "Negotiation wait per rank (from the readiness ticks)", columns, rows)


def _render_attribution(attribution: HorovodAttribution | None, console: Console) -> None:
    """Print the Horovod phases set against the writer rank's compute, per iteration."""
    if attribution is not None and attribution.iterations:
        columns = [
            Col("iteration"),
            Col("step"),
            Col("wire"),
            Col("hidden", drop=5),
            Col("exposed"),
            Col("exposed/step"),
            Col("negotiation", drop=4),
            Col("queue", drop=3),
            Col("memcpy", drop=2),
            Col("NCCL kernels", drop=1),
        ]
        rows = [
            [
                _rank(row.iteration),
                format_ns(row.step_ns),
                format_ns(row.wire_ns),
                format_ns(row.hidden_wire_ns),
                format_ns(row.exposed_wire_ns),
                format_ratio(row.exposed_wire_ratio),
                format_ns(row.negotiation_ns),
                format_ns(row.queue_ns),
                format_ns(row.memcpy_ns),
                format_ns(row.kernel_comm_ns),
            ]
            for row in attribution.iterations
        ]
        title = f"Horovod against rank {attribution.writer_rank}'s compute (profiler trace, wall clock)"
        print_table(console, title, columns, rows)
