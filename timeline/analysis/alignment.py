"""Clock alignment across hosts: estimate each rank's clock offset from synchronising collectives.

Takes the canonical events frame of several ranks and gives one offset per rank
(:data:`~timeline.analysis.schemas.CLOCK_OFFSETS_SCHEMA`), then shifts the events by them
(:func:`apply_clock_offsets`).

Ranks on one host share a clock, but nothing corrects the skew between hosts' clocks. An implicitly
synchronising collective (all-reduce, all-gather, reduce-scatter, all-to-all, barrier) ends on all
ranks within a few µs of each other: no rank can finish before the last one arrives and the data
has crossed the network. So with ``end(r, c)`` the end of logical collective ``c`` on rank ``r``
(:func:`~timeline.analysis.collectives.collective_instances`), and ``ref`` the reference rank,

``offset(r) = median over c of (end(r, c) − end(ref, c))``

is how far rank ``r``'s clock runs ahead of the reference's; the median ignores the occasional
collective whose end is late on one rank. Aligned times are ``t − offset(r)``. With ``hosts``,
the ranks of one host share the median of their offsets (one clock per host).
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from timeline.analysis.collectives import SYNCHRONISING_COLLECTIVES, collective_instances
from timeline.analysis.schemas import CLOCK_OFFSETS_SCHEMA
from timeline.errors import TraceContentError, UsageError
from timeline.schema import EVENTS_SCHEMA, validate

__all__ = ["apply_clock_offsets", "estimate_clock_offsets"]


def estimate_clock_offsets(
    events: pl.DataFrame,
    *,
    reference_rank: int | None = None,
    hosts: Mapping[int, str] | None = None,
    groups: pl.DataFrame | None = None,
    clocks: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Return each rank's clock offset relative to the reference rank, from collective ends.

    Parameters
    ----------
    events
        The canonical events frame of several Kineto ranks.
    reference_rank
        The rank whose clock the others are aligned to; default: the lowest rank with
        synchronising collectives.
    hosts
        Rank → host name. When given, the ranks of one host get one offset: the median of their
        estimates (the reference's host is pinned to 0). Ranks not in the mapping keep their own.
    groups
        ``Trace.groups``: the process groups the traces declare, so that only collectives of one
        group instance are compared (:func:`~timeline.analysis.collectives.collective_instances`;
        collectives whose group is ambiguous are not used).
    clocks
        Which ranks' times already compare (:func:`~timeline.analysis.groups.shared_clocks`, the
        ranks of one host): the groups of gloo collectives are then also told by their timing.

    Returns
    -------
    pl.DataFrame
        :data:`~timeline.analysis.schemas.CLOCK_OFFSETS_SCHEMA`, one row per rank with
        communication, sorted: ``offset_ns`` (null when the rank shares no synchronising collective
        with the reference), ``collectives`` (how many were compared), ``mad_ns`` (median absolute
        deviation of the per-collective differences from the offset: the estimate's noise).

    Raises
    ------
    TraceContentError
        If no rank has a synchronising collective (nothing to align on).
    UsageError
        If ``reference_rank`` has no synchronising collective.

    Examples
    --------
    >>> from timeline import load  # doctest: +SKIP
    >>> events = load("traces/").events  # doctest: +SKIP
    >>> aligned = apply_clock_offsets(events, estimate_clock_offsets(events))  # doctest: +SKIP
    """
    every = collective_instances(events, groups=groups, clocks=clocks)
    instances, reference = _synchronising(every, reference_rank)
    estimated = _estimates(instances, reference)
    all_ranks = sorted(every.get_column("rank").unique().to_list())
    frame = pl.DataFrame({"rank": all_ranks}, schema={"rank": pl.Int32}).join(
        estimated.with_columns(pl.col("rank").cast(pl.Int32)), on="rank", how="left"
    )
    frame = _per_host(frame, {int(r): str(h) for r, h in (hosts or {}).items()}, reference)
    return validate(frame.sort("rank"), CLOCK_OFFSETS_SCHEMA, what="clock offsets")


def _synchronising(instances: pl.DataFrame, reference_rank: int | None) -> tuple[pl.DataFrame, int]:
    """Return the synchronising collectives' instances and the reference rank they are aligned to."""
    synchronising = instances.filter(pl.col("collective").is_in(list(SYNCHRONISING_COLLECTIVES)))
    if synchronising.height == 0:
        msg = (
            "no synchronising collective (all_reduce, all_gather, reduce_scatter, all_to_all, barrier) "
            "in the traces: clocks cannot be aligned; drop --align"
        )
        raise TraceContentError(msg)
    ranks = sorted(synchronising.get_column("rank").unique().to_list())
    reference = ranks[0] if reference_rank is None else reference_rank
    if reference not in ranks:
        msg = f"reference rank {reference} has no synchronising collective to align on; choose one of {ranks}"
        raise UsageError(msg)
    return synchronising, reference


def _estimates(instances: pl.DataFrame, reference: int) -> pl.DataFrame:
    """Return per rank the median difference of its collectives' ends from the reference's, and its noise."""
    anchors = instances.filter(pl.col("rank") == reference).select("group", "index", _ref_end="end_ns")
    diffs = instances.join(anchors, on=["group", "index"], how="inner").with_columns(
        _d=pl.col("end_ns") - pl.col("_ref_end")
    )
    estimated = diffs.group_by("rank").agg(
        offset_ns=pl.col("_d").median().round().cast(pl.Int64), collectives=pl.len().cast(pl.Int64)
    )
    noise = (
        diffs.join(estimated, on="rank")
        .group_by("rank")
        .agg(mad_ns=(pl.col("_d") - pl.col("offset_ns")).abs().median().round().cast(pl.Int64))
    )
    return estimated.join(noise, on="rank")


def _per_host(frame: pl.DataFrame, host_names: dict[int, str], reference: int) -> pl.DataFrame:
    """Give the ranks of one host one offset (the median of theirs; the reference's host pinned to 0)."""
    frame = frame.with_columns(
        reference_rank=pl.lit(reference, dtype=pl.Int32),
        collectives=pl.col("collectives").fill_null(0),
        host=pl.col("rank").replace_strict(host_names, default=None, return_dtype=pl.String)
        if host_names
        else pl.lit(None, dtype=pl.String),
    )
    if not host_names:
        return frame
    reference_host = host_names.get(reference)
    per_host = pl.col("offset_ns").median().over("host").round().cast(pl.Int64)
    return frame.with_columns(
        offset_ns=pl.when(pl.col("host").is_null())
        .then(pl.col("offset_ns"))
        .when(pl.col("host") == reference_host)
        .then(pl.lit(0, dtype=pl.Int64))
        .otherwise(per_host)
    )


def apply_clock_offsets(
    events: pl.DataFrame, offsets: pl.DataFrame, *, horovod_writer: int = 0
) -> pl.DataFrame:
    """Return the events with every rank's times moved onto the reference clock.

    ``start_ns − offset_ns`` and ``end_ns − offset_ns`` of the event's rank (durations unchanged;
    a null or missing offset leaves the rank as it is). Horovod events were all timed by the
    process that wrote the timeline, so they move by the writer's offset, ticks included.

    Parameters
    ----------
    events
        The canonical events frame.
    offsets
        :func:`estimate_clock_offsets`, or any frame with ``rank`` and ``offset_ns``.
    horovod_writer
        The rank that wrote the Horovod timeline (the loader's convention: 0).

    Returns
    -------
    pl.DataFrame
        :data:`timeline.schema.EVENTS_SCHEMA`, sorted by rank and start.
    """
    table = offsets.select(pl.col("rank").cast(pl.Int32), _offset=pl.col("offset_ns").cast(pl.Int64))
    writer = table.filter(pl.col("rank") == horovod_writer).get_column("_offset").to_list()
    writer_offset = writer[0] if writer and writer[0] is not None else 0
    shifted = (
        events.join(table, on="rank", how="left", maintain_order="left")
        .with_columns(
            _offset=pl.when(pl.col("source") == "horovod")
            .then(pl.lit(writer_offset, dtype=pl.Int64))
            .otherwise(pl.col("_offset").fill_null(0))
        )
        .with_columns(
            start_ns=pl.col("start_ns") - pl.col("_offset"), end_ns=pl.col("end_ns") - pl.col("_offset")
        )
    )
    return validate(shifted, EVENTS_SCHEMA, what="aligned events").sort(
        "rank", "start_ns", maintain_order=True
    )
