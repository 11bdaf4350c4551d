"""The collectives report: collectives matched across ranks, their bandwidth, stragglers, Horovod phases.

Takes a loaded :class:`~timeline.trace.Trace` (and its overlap analysis) and gives plain, versioned
data: what ``timeline collectives`` prints and ``--json`` emits (:func:`build_collectives_report`),
and the link utilisation that ``timeline analyze --link-gbps`` adds (:func:`utilisation_summary`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import polars as pl

from timeline.analysis.collectives import (
    CollectiveMatch,
    compute_iteration_utilisation,
    implausible_warning,
    match_collectives,
)
from timeline.analysis.groups import nodes_of, shared_clocks
from timeline.analysis.horovod_phases import analyze_horovod, attribute_horovod_phases, horovod_limitations
from timeline.analysis.overlap import Overlap, compute_overlap
from timeline.analysis.stragglers import find_stragglers
from timeline.arguments import check_instance
from timeline.errors import UsageError
from timeline.plausibility import without_cross_rank_times, without_stragglers
from timeline.trace import Trace

__all__ = [
    "REPORT_VERSION",
    "build_collectives_report",
    "clocks_of",
    "utilisation_summary",
    "world_size_of",
    "world_size_of_files",
]

REPORT_VERSION = 2
"""The layout version of :func:`build_collectives_report` (``timeline collectives --json``).

2 (#20): ``groups``, ``point_to_point``, ``ambiguity``, ``ambiguous`` and ``gpus_per_node`` keys;
``collectives`` rows gain ``dimension``, ``attributed_by`` and ``spans_nodes``; ``matched_by`` may
be ``comms_id``; sends and receives are paired in ``point_to_point`` instead of matched as
collectives; ``attributed_by`` may be ``timing``, ``thread`` or ``pairing``; ``ambiguous`` and
``ambiguity`` rows have ``matched_by`` ``ambiguous`` (the group) or ``unordered`` (the place in its
order). 1: the first layout."""


def _rows(frame: pl.DataFrame) -> list[dict[str, Any]]:
    """Plain rows of a frame (enums as strings)."""
    return frame.with_columns(pl.col(pl.Enum).cast(pl.String)).to_dicts()


def world_size_of(trace: Trace) -> int | None:
    """Return the job's world size the profiler traces record (``distributedInfo``), or None."""
    return world_size_of_files(trace.files)


def world_size_of_files(files: pl.DataFrame) -> int | None:
    """Return the world size a file table (``Trace.files``) records for the profiler traces, or None."""
    sizes = files.filter(pl.col("format") != "horovod").get_column("world_size").drop_nulls()
    return None if sizes.is_empty() else int(sizes.max())  # type: ignore[arg-type]


def _implausible(frame: pl.DataFrame) -> int:
    """How many rows of a frame with an ``implausible`` column are faster than physics."""
    return int(frame.get_column("implausible").sum())


def clocks_of(
    trace: Trace,
    *,
    offsets: pl.DataFrame | None = None,
    gpus_per_node: int | None = None,
) -> pl.DataFrame:
    """Return which of the trace's ranks have times that compare.

    :func:`~timeline.analysis.groups.shared_clocks` of its file table: the ranks of one node, and
    after ``--align`` (``offsets``) every rank the alignment moved; none when the load found clocks
    that cannot be compared (``trace.clock_note``).
    """
    return shared_clocks(
        trace.files, gpus_per_node=gpus_per_node, offsets=offsets, comparable=trace.clock_note is None
    )


def _match(
    trace: Trace,
    overlap: Overlap,
    *,
    link_gbps: float | None,
    overrides: Mapping[str, str] | None,
    nodes: pl.DataFrame | None = None,
    offsets: pl.DataFrame | None = None,
    gpus_per_node: int | None = None,
) -> CollectiveMatch:
    """Match the trace's collectives within the groups it declares (the job's world size for ``*``)."""
    return match_collectives(
        trace.events,
        windows=overlap.windows,
        link_gbps=link_gbps,
        world_size=world_size_of(trace),
        groups=trace.groups,
        overrides=overrides,
        nodes=nodes,
        clocks=clocks_of(trace, offsets=offsets, gpus_per_node=gpus_per_node),
    )


def utilisation_summary(
    trace: Trace,
    overlap: Overlap,
    link_gbps: float,
    *,
    overrides: Mapping[str, str] | None = None,
    offsets: pl.DataFrame | None = None,
) -> dict[str, Any]:
    """Return the ``"utilisation"`` object of ``timeline analyze --json``.

    Keys: ``link_gbps``; ``iterations`` (rows of ``ITERATION_UTILISATION_SCHEMA``, from the
    collectives matched across ranks); ``horovod`` (the timeline's totals row, or null);
    ``implausible`` (how many logical collectives and fused batches were faster than the link, left
    out of both: :func:`~timeline.analysis.collectives.implausible_warning` words the warning).
    """
    events = trace.events
    iterations: list[dict[str, Any]] = []
    implausible = 0
    if events.filter((pl.col("source") == "kineto") & (pl.col("kind") == "communication")).height:
        match = _match(trace, overlap, link_gbps=link_gbps, overrides=overrides, offsets=offsets)
        utilisation = compute_iteration_utilisation(
            match.collectives,
            link_gbps=link_gbps,
            windows=overlap.windows,
            iteration_overlap=overlap.iterations,
        )
        iterations = _rows(utilisation)
        implausible += _implausible(match.collectives)
    horovod = None
    if events.filter(pl.col("source") == "horovod").height:
        analysis = analyze_horovod(events, link_gbps=link_gbps)
        horovod = _rows(analysis.totals)[0]
        implausible += _implausible(analysis.batches)
    return {"link_gbps": link_gbps, "iterations": iterations, "horovod": horovod, "implausible": implausible}


def _matched_ranks(match: CollectiveMatch) -> list[int]:
    """Return the ranks with a collective, a send or receive, or a collective of an ambiguous group."""
    pairs = match.point_to_point
    ranks = pl.concat(
        [
            match.ranks.get_column("rank"),
            pairs.get_column("src").filter(pairs.get_column("send_start_ns").is_not_null()),
            pairs.get_column("dst").filter(pairs.get_column("recv_start_ns").is_not_null()),
            match.ambiguous.get_column("rank"),
        ]
    )
    return sorted(ranks.unique().to_list())


def _ambiguity(ambiguous: pl.DataFrame) -> list[dict[str, Any]]:
    """Summarise the events matched across no rank for doubt: per candidates, why and collective."""
    summary = (
        ambiguous.with_columns(pl.col("candidates").list.join(","))
        .group_by("candidates", "matched_by", "collective")
        .agg(
            events=pl.len().cast(pl.Int64),
            ranks=pl.col("rank").unique().sort(),
            group_size=pl.col("group_size").drop_nulls().unique().sort(),
        )
        .sort("candidates", "matched_by", "collective", nulls_last=True)
    )
    return [
        {**row, "candidates": row["candidates"].split(",") if row["candidates"] else []}
        for row in summary.to_dicts()
    ]


def _horovod_section(
    trace: Trace, warnings: list[str], link_gbps: float | None, writer_trace: Callable[[int], Trace] | None
) -> dict[str, Any]:
    """Return the ``horovod`` object of the report; its warnings are added to ``warnings``."""
    events = trace.events
    clock = _horovod_clock(trace)
    analysis = analyze_horovod(events, link_gbps=link_gbps, clock=clock)
    attribution = None
    limitations = analysis.limitations
    if events.filter((pl.col("source") == "kineto") & (pl.col("rank") == 0)).height and clock == "epoch":
        attributed = attribute_horovod_phases(writer_trace(0) if writer_trace is not None else trace)
        warnings.extend(attributed.warnings)
        limitations = horovod_limitations(clock=clock, with_framework_trace=True)
        attribution = {"writer_rank": attributed.writer_rank, "iterations": _rows(attributed.iterations)}
    too_fast = implausible_warning(_implausible(analysis.batches), link_gbps)
    if too_fast is not None:
        warnings.append(f"horovod fused batches: {too_fast}")
    return {
        "totals": _rows(analysis.totals)[0],
        "tensors": _rows(analysis.tensors),
        "batches": _rows(analysis.batches),
        "negotiation": _rows(analysis.negotiation),
        "limitations": list(limitations),
        "attribution": attribution,
    }


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
    overrides: Mapping[str, str] | None = None,
    gpus_per_node: int | None = None,
) -> dict[str, Any]:
    """Return everything ``timeline collectives`` prints, as plain data (the ``--json`` layout).

    ``overlap``: the overlap analysis of the events (default: computed from ``trace.events``, which
    must then hold every event). ``writer_trace(rank)``: every event of the rank that wrote a Horovod
    timeline, with the timeline (default: ``trace`` itself), for the phases set against its compute.
    ``rank_rows=False`` leaves ``collective_ranks`` (a row per collective per rank: the largest part
    on many ranks) and ``ambiguous`` (a row per event whose group is ambiguous) empty, for the
    tables, which do not print them. ``overrides``: description → dimension label
    (``--dimension``); ``gpus_per_node``: ranks per node (else the hosts the traces name) for the
    intra- vs inter-node split.

    Raises
    ------
    TypeError
        ``trace`` is not a :class:`~timeline.trace.Trace` (named).
    """
    check_instance(trace, Trace, argument="trace", fix="pass timeline.load(...) or Analysed.trace")
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
        "gpus_per_node": gpus_per_node,
        "groups": [],
        "point_to_point": [],
        "ambiguity": [],
        "ambiguous": [],
        "utilisation": [],
        "stragglers": {"iterations": [], "ranks": []},
        "horovod": None,
    }
    if kineto_comm:
        overlap = overlap if overlap is not None else compute_overlap(events)
        nodes = nodes_of(trace.files, gpus_per_node=gpus_per_node)
        match = _match(
            trace,
            overlap,
            link_gbps=link_gbps,
            overrides=overrides,
            nodes=nodes,
            offsets=offsets,
            gpus_per_node=gpus_per_node,
        )
        stragglers = find_stragglers(match, iteration_overlap=overlap.iterations)
        if trace.clock_note is not None:  # the ranks' clocks disagree (a load warning): no time compares
            match, stragglers = without_cross_rank_times(match), without_stragglers(stragglers)
        utilisation = compute_iteration_utilisation(
            match.collectives,
            link_gbps=link_gbps,
            windows=overlap.windows,
            iteration_overlap=overlap.iterations,
        )
        report["warnings"].extend(match.warnings)
        report.update(
            ranks=_matched_ranks(match),
            collectives=_rows(match.collectives),
            collective_ranks=_rows(match.ranks) if rank_rows else [],
            mismatches=_rows(match.mismatches),
            groups=_rows(match.groups),
            point_to_point=_rows(match.point_to_point),
            ambiguity=_ambiguity(match.ambiguous),
            ambiguous=_rows(match.ambiguous) if rank_rows else [],
            utilisation=_rows(utilisation),
            stragglers={"iterations": _rows(stragglers.iterations), "ranks": _rows(stragglers.ranks)},
        )
    if has_horovod:
        report["horovod"] = _horovod_section(trace, report["warnings"], link_gbps, writer_trace)
    return report
