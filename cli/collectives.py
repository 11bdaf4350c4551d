"""``timeline collectives``: every collective matched across ranks, link utilisation, stragglers, clocks.

Wires the library together: :mod:`timeline.analysis.collectives` (matching, skew, wait vs transfer,
bandwidth), :mod:`timeline.analysis.stragglers`, :mod:`timeline.analysis.alignment` (``--align``)
and :mod:`timeline.analysis.horovod_phases` (Horovod timelines, alone or beside the profiler
traces). Also gives ``timeline analyze`` its ``--link-gbps`` and ``--align`` pieces
(:func:`utilisation_summary`, :func:`render_utilisation`, :func:`render_clock_offsets`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import msgspec
import polars as pl
import typer
from rich.console import Console
from rich.table import Table

from cli.common import (
    CommKernelOption,
    IncludePythonOption,
    PathsArgument,
    RankOption,
    RankRegexOption,
    echo_warnings,
    format_ns,
    format_ratio,
    user_errors,
)
from cli.execution import ExecutorOption, RayAddressOption, analyze_inputs, inputs_of
from timeline.analysis.collectives import (
    ALL_COMMUNICATION_GROUP,
    compute_iteration_utilisation,
    match_collectives,
)
from timeline.analysis.horovod_phases import analyze_horovod, attribute_horovod_phases, horovod_limitations
from timeline.analysis.links import parse_link_gbps
from timeline.analysis.overlap import Overlap, compute_overlap
from timeline.analysis.stragglers import find_stragglers
from timeline.errors import UsageError
from timeline.trace import Trace

__all__ = [
    "REPORT_VERSION",
    "AlignOption",
    "LinkOption",
    "build_collectives_report",
    "collectives_command",
    "render_clock_offsets",
    "render_collectives_report",
    "render_utilisation",
    "utilisation_summary",
]

REPORT_VERSION = 1

LinkOption = Annotated[
    str | None,
    typer.Option(
        "--link-gbps",
        help="The link to measure utilisation against, one direction: Gbit/s (100, 25G, 12.5GB/s) or a "
        "preset (10gbe, 25gbe, 100gbe, 400gbe, ib-edr, ib-hdr, ib-ndr, nvlink3, nvlink4, pcie4 …).",
        show_default=False,
    ),
]
AlignOption = Annotated[
    bool,
    typer.Option(
        "--align",
        help="Estimate each rank's clock offset from the ends of synchronising collectives and shift its "
        "events onto rank 0's clock first (ranks on different hosts).",
    ),
]


def _rows(frame: pl.DataFrame) -> list[dict[str, Any]]:
    """Plain rows of a frame (enums as strings)."""
    return frame.with_columns(pl.col(pl.Enum).cast(pl.String)).to_dicts()


def utilisation_summary(trace: Trace, overlap: Overlap, link_gbps: float) -> dict[str, Any]:
    """Return the ``"utilisation"`` object of ``timeline analyze --json``.

    Keys: ``link_gbps``; ``iterations`` (rows of ``ITERATION_UTILISATION_SCHEMA``, from the
    collectives matched across ranks); ``horovod`` (the timeline's totals row, or null).
    """
    events = trace.events
    iterations: list[dict[str, Any]] = []
    if events.filter((pl.col("source") == "kineto") & (pl.col("kind") == "communication")).height:
        match = match_collectives(events, windows=overlap.windows, link_gbps=link_gbps)
        utilisation = compute_iteration_utilisation(
            match.collectives,
            link_gbps=link_gbps,
            windows=overlap.windows,
            iteration_overlap=overlap.iterations,
        )
        iterations = _rows(utilisation)
    horovod = None
    if events.filter(pl.col("source") == "horovod").height:
        horovod = _rows(analyze_horovod(events, link_gbps=link_gbps).totals)[0]
    return {"link_gbps": link_gbps, "iterations": iterations, "horovod": horovod}


def _horovod_clock(trace: Trace) -> str | None:
    clocks = trace.files.filter(pl.col("format") == "horovod").get_column("clock").to_list()
    return clocks[0] if clocks else None


def build_collectives_report(
    trace: Trace,
    *,
    link_gbps: float | None = None,
    offsets: pl.DataFrame | None = None,
    overlap: Overlap | None = None,
    writer_trace: Callable[[int], Trace] | None = None,
    rank_rows: bool = True,
) -> dict[str, Any]:
    """Return everything ``timeline collectives`` prints, as plain data (the ``--json`` layout).

    ``overlap``: the overlap analysis of the events (default: computed from ``trace.events``, which
    must then hold every event). ``writer_trace(rank)``: every event of the rank that wrote a Horovod
    timeline, with the timeline (default: ``trace`` itself), for the phases set against its compute.
    ``rank_rows=False`` leaves ``collective_ranks`` (a row per collective per rank: the largest part
    on many ranks) empty, for the tables, which do not print it.
    """
    events = trace.events
    kineto_comm = events.filter((pl.col("source") == "kineto") & (pl.col("kind") == "communication")).height
    has_horovod = events.filter(pl.col("source") == "horovod").height > 0
    if not kineto_comm and not has_horovod:
        msg = (
            "no communication events in the traces: nothing to match "
            "(is --comm-kernel needed for custom kernels?)"
        )
        raise UsageError(msg)
    report: dict[str, Any] = {
        "version": REPORT_VERSION,
        "files": trace.files.to_dicts(),
        "warnings": list(trace.warnings),
        "link_gbps": link_gbps,
        "clock_offsets": None if offsets is None else _rows(offsets),
        "ranks": [],
        "collectives": [],
        "collective_ranks": [],
        "mismatches": [],
        "utilisation": [],
        "stragglers": {"iterations": [], "ranks": []},
        "horovod": None,
    }
    if kineto_comm:
        overlap = overlap if overlap is not None else compute_overlap(events)
        match = match_collectives(events, windows=overlap.windows, link_gbps=link_gbps)
        stragglers = find_stragglers(match, iteration_overlap=overlap.iterations)
        utilisation = compute_iteration_utilisation(
            match.collectives,
            link_gbps=link_gbps,
            windows=overlap.windows,
            iteration_overlap=overlap.iterations,
        )
        report["warnings"].extend(match.warnings)
        report.update(
            ranks=match.ranks.get_column("rank").unique().sort().to_list(),
            collectives=_rows(match.collectives),
            collective_ranks=_rows(match.ranks) if rank_rows else [],
            mismatches=_rows(match.mismatches),
            utilisation=_rows(utilisation),
            stragglers={"iterations": _rows(stragglers.iterations), "ranks": _rows(stragglers.ranks)},
        )
    if has_horovod:
        clock = _horovod_clock(trace)
        analysis = analyze_horovod(events, link_gbps=link_gbps, clock=clock)
        attribution = None
        limitations = analysis.limitations
        if events.filter((pl.col("source") == "kineto") & (pl.col("rank") == 0)).height and clock == "epoch":
            attributed = attribute_horovod_phases(writer_trace(0) if writer_trace is not None else trace)
            report["warnings"].extend(attributed.warnings)
            limitations = horovod_limitations(clock=clock, with_framework_trace=True)
            attribution = {"writer_rank": attributed.writer_rank, "iterations": _rows(attributed.iterations)}
        report["horovod"] = {
            "totals": _rows(analysis.totals)[0],
            "tensors": _rows(analysis.tensors),
            "batches": _rows(analysis.batches),
            "negotiation": _rows(analysis.negotiation),
            "limitations": list(limitations),
            "attribution": attribution,
        }
    return report


def collectives_command(
    paths: PathsArgument,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print one JSON object instead of tables.")
    ] = False,
    link_gbps: LinkOption = None,
    align: AlignOption = False,
    limit: Annotated[
        int,
        typer.Option(
            "--limit", min=1, help="Rows per table (collectives, batches, tensors); --json has all."
        ),
    ] = 20,
    rank: RankOption = None,
    rank_regex: RankRegexOption = None,
    comm_kernel: CommKernelOption = None,
    include_python: IncludePythonOption = False,
    executor: ExecutorOption = None,
    ray_address: RayAddressOption = None,
) -> None:
    """Match every collective across ranks: skew, wait vs transfer, bandwidth, link utilisation, stragglers.

    Horovod timelines: per-tensor phases, fused batches and their bandwidth, negotiation wait per rank.

    Exit codes: 0 success, 2 bad input (one 'error:' line on stderr).
    """
    with user_errors():
        link = parse_link_gbps(link_gbps) if link_gbps is not None else None
        inputs = inputs_of(paths, rank, rank_regex, comm_kernel, include_python, executor, ray_address)
        analysed = analyze_inputs(inputs, align=align)
        trace = analysed.trace
        report = build_collectives_report(
            trace,
            link_gbps=link,
            offsets=analysed.offsets,
            overlap=analysed.overlap,
            writer_trace=lambda writer: analysed.full_ranks([writer]),
            rank_rows=json_output,
        )
    echo_warnings(report["warnings"][len(trace.warnings) :])
    if json_output:
        typer.echo(msgspec.json.encode(report).decode())
        return
    console = Console(highlight=False, soft_wrap=False, width=max(Console().width, 150))
    render_collectives_report(report, console, limit=limit)


def _table(title: str, columns: list[str]) -> Table:
    table = Table(title=title, title_justify="left", title_style="bold", header_style="bold")
    for i, name in enumerate(columns):
        left = i == 0 and not name.startswith(("rank", "#", "iteration", "batch"))
        table.add_column(name, justify="left" if left else "right", no_wrap=True)
    return table


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


def _rank(value: int | None) -> str:
    return "-" if value is None else str(value)


def render_clock_offsets(offsets: list[dict[str, Any]], console: Console) -> None:
    """Print the estimated clock offsets (``--align``)."""
    table = _table(
        f"Clock offsets (vs rank {offsets[0]['reference_rank']})" if offsets else "Clock offsets",
        ["rank", "offset", "collectives", "noise (MAD)"],
    )
    for row in offsets:
        table.add_row(
            str(row["rank"]), format_ns(row["offset_ns"]), str(row["collectives"]), format_ns(row["mad_ns"])
        )
    console.print(table)


def render_utilisation(utilisation: dict[str, Any], console: Console) -> None:
    """Print the per-iteration link utilisation (``--link-gbps``)."""
    link = utilisation["link_gbps"]
    rows = utilisation["iterations"]
    if rows:
        table = _table(
            f"Link utilisation against {link:g} Gbit/s (bus bandwidth of the matched collectives)",
            [
                "iteration",
                "collectives",
                "bytes",
                "transfer",
                "busbw Gbit/s",
                "busbw/link",
                "bus bytes/step·link",
                "exposed",
                "link could carry",
            ],
        )
        for row in rows:
            table.add_row(
                _rank(row["iteration"]),
                str(row["collectives"]),
                format_bytes(row["bytes"]),
                format_ns(row["transfer_ns"]),
                _gbps(row["busbw_gbps"]),
                format_ratio(row["link_utilisation_ratio"]),
                format_ratio(row["step_link_utilisation_ratio"]),
                format_ns(row["exposed_comm_ns"]),
                format_bytes(row["exposed_link_bytes"]),
            )
        console.print(table)
    horovod = utilisation.get("horovod")
    if horovod:
        console.print(
            f"horovod: {format_bytes(horovod['bytes'])} over {format_ns(horovod['wire_ns'])} "
            f"of wire (union): busbw {_gbps(horovod['busbw_gbps'])} Gbit/s = "
            f"{format_ratio(horovod['link_utilisation_ratio'])} of {link:g} Gbit/s"
        )


def render_collectives_report(report: dict[str, Any], console: Console, *, limit: int = 20) -> None:
    """Print the report of ``timeline collectives`` as tables."""
    if report["clock_offsets"]:
        render_clock_offsets(report["clock_offsets"], console)
    if report["collectives"]:
        _render_collectives(report, console, limit=limit)
    if report["horovod"] is not None:
        _render_horovod(report["horovod"], console, limit=limit, link=report["link_gbps"])


def _render_collectives(report: dict[str, Any], console: Console, *, limit: int) -> None:
    collectives = report["collectives"]
    link = report["link_gbps"]
    ranks = report["ranks"]
    groups = {row["group"] for row in collectives}
    complete = sum(1 for row in collectives if row["complete"])
    console.print(
        f"[bold]timeline collectives[/bold]: {len(collectives)} logical collective(s) in "
        f"{len(groups)} group(s) across {len(ranks)} rank(s); {complete} matched on every rank of their group"
    )
    shown = collectives
    title = "Collectives across ranks"
    if len(collectives) > limit:
        shown = sorted(collectives, key=lambda r: -(r["total_wait_ns"] or 0))[:limit]
        title += f" (the {limit} with the most wait of {len(collectives)}; --json for all)"
    show_group = groups != {ALL_COMMUNICATION_GROUP}
    columns = [
        "#",
        *(["group"] if show_group else []),
        "collective",
        "iteration",
        "ranks",
        "bytes",
        "start skew",
        "end skew",
        "transfer",
        "max wait",
        "last rank",
        "busbw Gbit/s",
    ]
    if link is not None:
        columns.append("busbw/link")
    table = _table(title, columns)
    for row in shown:
        cells = [
            str(row["collective_id"]),
            *([row["group"]] if show_group else []),
            row["collective"] or "-",
            _rank(row["iteration"]),
            f"{row['ranks']}/{row['expected_ranks']}",
            format_bytes(row["bytes"]),
            format_ns(row["start_skew_ns"]),
            format_ns(row["end_skew_ns"]),
            format_ns(row["transfer_ns"]),
            format_ns(row["max_wait_ns"]),
            _rank(row["last_rank"]),
            _gbps(row["busbw_gbps"]),
        ]
        if link is not None:
            cells.append(format_ratio(row["link_utilisation_ratio"]))
        table.add_row(*cells)
    console.print(table)

    ranking = report["stragglers"]["ranks"]
    if ranking:
        table = _table(
            "Who everyone waits for (synchronising collectives, whole trace)",
            ["rank", "times last", "wait caused", "share", "own wait", "mean arrival lag"],
        )
        for row in ranking[:limit]:
            table.add_row(
                str(row["rank"]),
                str(row["times_last"]),
                format_ns(row["caused_wait_ns"]),
                format_ratio(row["caused_wait_ratio"]),
                format_ns(row["waited_ns"]),
                format_ns(row["mean_arrival_lag_ns"]),
            )
        console.print(table)
    per_iteration = report["stragglers"]["iterations"]
    utilisation = {row["iteration"]: row for row in report["utilisation"]}
    if per_iteration:
        columns = [
            "iteration",
            "straggler",
            "wait caused",
            "share",
            "mean wait",
            "transfer",
            "verdict",
            "busbw Gbit/s",
        ]
        if link is not None:
            columns += ["busbw/link", "exposed", "link could carry"]
        table = _table("Per iteration", columns)
        for row in per_iteration:
            util = utilisation.get(row["iteration"], {})
            cells = [
                _rank(row["iteration"]),
                _rank(row["straggler_rank"]),
                format_ns(row["straggler_caused_wait_ns"]),
                format_ratio(row["straggler_share_ratio"]),
                format_ns(row["mean_wait_ns"]),
                format_ns(row["transfer_ns"]),
                (row["verdict"] or "-").replace("_", " "),
                _gbps(util.get("busbw_gbps")),
            ]
            if link is not None:
                cells += [
                    format_ratio(util.get("link_utilisation_ratio")),
                    format_ns(util.get("exposed_comm_ns")),
                    format_bytes(util.get("exposed_link_bytes")),
                ]
            table.add_row(*cells)
        console.print(table)
        console.print(
            "verdict: [bold]slow rank[/bold] = one rank arrives late and causes most of the wait "
            "(compare its compute); [bold]imbalance[/bold] = ranks arrive late by turns; "
            "[bold]slow link[/bold] = the transfer itself dominates (compare busbw with --link-gbps)"
        )


def _render_horovod(horovod: dict[str, Any], console: Console, *, limit: int, link: float | None) -> None:
    totals = horovod["totals"]
    console.print(
        f"[bold]horovod timeline[/bold]: {totals['tensors']} tensor(s), {totals['operations']} "
        f"operation(s) in {totals['batches']} fused batch(es), world size {_rank(totals['world_size'])}"
    )
    console.print(
        f"wire time {format_ns(totals['wire_ns'])} (union over fused tensors; the sum over tensors would say "
        f"{format_ns(totals['wire_sum_ns'])}) = {format_ratio(totals['wire_ratio'])} of the "
        f"{format_ns(totals['span_ns'])} timeline; {format_bytes(totals['bytes'])} moved at algbw "
        f"{_gbps(totals['algbw_gbps'])} / busbw {_gbps(totals['busbw_gbps'])} Gbit/s"
        + ("" if link is None else f" = {format_ratio(totals['link_utilisation_ratio'])} of {link:g} Gbit/s")
    )
    batches = horovod["batches"]
    if batches:
        shown = sorted(batches, key=lambda r: -(r["bytes"] or 0))[:limit]
        columns = ["batch", "collective", "tensors", "bytes", "wire", "algbw Gbit/s", "busbw Gbit/s"]
        if link is not None:
            columns.append("busbw/link")
        table = _table(f"Fused batches (the {len(shown)} largest of {len(batches)})", columns)
        for row in shown:
            cells = [
                str(row["batch"]),
                row["collective"] or "-",
                str(row["tensors"]),
                format_bytes(row["bytes"]),
                format_ns(row["wire_ns"]),
                _gbps(row["algbw_gbps"]),
                _gbps(row["busbw_gbps"]),
            ]
            if link is not None:
                cells.append(format_ratio(row["link_utilisation_ratio"]))
            table.add_row(*cells)
        console.print(table)
    tensors = horovod["tensors"]
    if tensors:
        shown = sorted(tensors, key=lambda r: -(r["wire_ns"] + r["negotiation_ns"]))[:limit]
        table = _table(
            f"Per-tensor phases (the {len(shown)} with the most wire + negotiation of {len(tensors)})",
            [
                "tensor",
                "ops",
                "bytes",
                "negotiation",
                "wait",
                "queue",
                "memcpy in",
                "wire",
                "memcpy out",
                "other",
            ],
        )
        for row in shown:
            table.add_row(
                row["tensor"] or f"pid {row['pid']}",
                str(row["operations"]),
                format_bytes(row["bytes"]),
                format_ns(row["negotiation_ns"]),
                format_ns(row["wait_ns"]),
                format_ns(row["queue_ns"]),
                format_ns(row["memcpy_in_ns"]),
                format_ns(row["wire_ns"]),
                format_ns(row["memcpy_out_ns"]),
                format_ns(row["other_ns"]),
            )
        console.print(table)
    negotiation = horovod["negotiation"]
    if negotiation:
        table = _table(
            "Negotiation wait per rank (from the readiness ticks)",
            ["rank", "negotiations", "waited", "mean waited", "times last", "wait caused"],
        )
        for row in sorted(negotiation, key=lambda r: -r["caused_wait_ns"])[:limit]:
            table.add_row(
                str(row["rank"]),
                str(row["negotiations"]),
                format_ns(row["waited_ns"]),
                format_ns(row["mean_waited_ns"]),
                str(row["times_last"]),
                format_ns(row["caused_wait_ns"]),
            )
        console.print(table)
    attribution = horovod["attribution"]
    if attribution and attribution["iterations"]:
        table = _table(
            f"Horovod against rank {attribution['writer_rank']}'s compute (profiler trace, wall clock)",
            [
                "iteration",
                "step",
                "wire",
                "hidden",
                "exposed",
                "exposed/step",
                "negotiation",
                "queue",
                "memcpy",
                "NCCL kernels",
            ],
        )
        for row in attribution["iterations"]:
            table.add_row(
                _rank(row["iteration"]),
                format_ns(row["step_ns"]),
                format_ns(row["wire_ns"]),
                format_ns(row["hidden_wire_ns"]),
                format_ns(row["exposed_wire_ns"]),
                format_ratio(row["exposed_wire_ratio"]),
                format_ns(row["negotiation_ns"]),
                format_ns(row["queue_ns"]),
                format_ns(row["memcpy_ns"]),
                format_ns(row["kernel_comm_ns"]),
            )
        console.print(table)
    for line in horovod["limitations"]:
        console.print(f"needs more than the timeline: {line}")
