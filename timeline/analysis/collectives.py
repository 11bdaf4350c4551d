"""Collectives across ranks: matching, bandwidth, skew, wait vs transfer, link utilisation.

Takes the canonical events frame of several ranks and gives one row per *logical* collective (the
k-th collective of a process group, seen on every rank of the group) and one row per logical
collective and rank (:data:`~timeline.analysis.schemas.COLLECTIVES_SCHEMA`,
:data:`~timeline.analysis.schemas.COLLECTIVE_RANKS_SCHEMA`):

- **matching**: the communication events each rank's overlap analysis measures (collective kernels
  on GPU ranks, ``gloo:*`` ops on CPU-only ranks) are grouped per rank and process group
  (``pg_name``; without one, all of a rank's communication forms one sequence, ``group = "*"``),
  ordered by start, and the k-th of each rank is one logical collective. When every event of a
  group carries ``seq`` (torch ≥ 2.6 kernels), ``seq`` is the index instead, and events sharing a
  ``seq`` on one rank (coalesced kernels) are one instance. Ranks with fewer collectives than the
  others are reported (:attr:`CollectiveMatch.mismatches`), never an error.
- **skew**: ``start_skew_ns = last start − first start``, ``end_skew_ns = last end − first end``.
- **wait vs transfer** (TraceLens', torch-tb-profiler's split): an implicitly synchronising
  collective cannot finish on any rank before the last rank arrives, so the shortest duration
  across ranks is the transfer (``transfer_ns``) and the rest of each rank's duration is waiting
  for the others (``wait_ns = dur_ns − transfer_ns``); the rank that started last is
  ``last_rank``.
- **bandwidth** (nccl-tests' convention): ``algbw = bytes / transfer``, ``busbw = algbw × factor``,
  factor ``2(n−1)/n`` for all-reduce, ``(n−1)/n`` for all-gather, reduce-scatter, all-to-all,
  gather, scatter, ``1`` for broadcast, reduce and point-to-point, with ``n`` the group size.
- **utilisation**: ``busbw / link`` per collective, and per iteration
  (:func:`compute_iteration_utilisation`).

Every figure is defined, with its formula, in ``docs/collectives.md``. Clock skew across hosts
enters the skews directly: align the clocks first (:mod:`timeline.analysis.alignment`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import polars as pl

from timeline.analysis.group_inference import SYNCHRONISING_COLLECTIVES, UNEVEN_COLLECTIVES
from timeline.analysis.groups import (
    ALL_COMMUNICATION_GROUP,
    GroupInstance,
    _instances_frame,
    _measured_attribution,
)
from timeline.analysis.iterations import assign_iterations, rank_modes, with_iterations
from timeline.analysis.links import bandwidth_ceiling
from timeline.analysis.schemas import (
    AMBIGUOUS_COLLECTIVES_SCHEMA,
    COLLECTIVE_GROUPS_SCHEMA,
    COLLECTIVE_MISMATCHES_SCHEMA,
    COLLECTIVE_RANKS_SCHEMA,
    COLLECTIVES_SCHEMA,
    ITERATION_UTILISATION_SCHEMA,
    POINT_TO_POINT_SCHEMA,
)
from timeline.arguments import check_events
from timeline.schema import PROCESS_GROUPS_SCHEMA, validate

__all__ = [
    "ALL_COMMUNICATION_GROUP",
    "SYNCHRONISING_COLLECTIVES",
    "CollectiveMatch",
    "attributed_communication",
    "bandwidth_columns",
    "bus_factor",
    "bus_factor_expr",
    "collective_instances",
    "compute_iteration_utilisation",
    "implausible_warning",
    "match_collectives",
    "match_point_to_point",
]

_POINT_TO_POINT = ("send", "recv", "send_recv")
_DIRECTED = ("send", "recv")
"""Point-to-point operations with a direction: paired (:func:`match_point_to_point`), not matched as
collectives. ``send_recv`` (a SendRecv kernel without arguments: an all-to-all, or a batch of sends
and receives) has none and is matched within its group as before."""
_HALF_FACTOR = ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter")
_UNIT_FACTOR = ("broadcast", "reduce", *_POINT_TO_POINT)
_GATHERING = ("all_gather", "gather")
_NO_DATA = ("barrier", "wait")
# Collectives whose input size may legitimately differ across ranks (uneven splits, p2p pairs).
_UNEVEN = UNEVEN_COLLECTIVES


_ATTRIBUTION_COLUMNS = (
    *("rank", "kind", "source", "device", "name", "pid", "tid", "collective"),
    *("pg_name", "pg_desc", "pg_ranks", "seq", "comms_id", "peer", "group_peer"),
    *("start_ns", "end_ns", "in_bytes", "out_bytes", "group_size"),
)
"""The events' columns the attribution of communication reads (:func:`_attribution`)."""
_INSTANCE_COLUMNS = (
    *("group", "dimension", "index", "_key", "matched_by", "attributed_by", "rank", "collective"),
    *("events", "start_ns", "end_ns", "dur_ns", "in_bytes", "out_bytes", "group_size"),
)
"""The columns of a numbered instance (:func:`_numbered`), in order."""

_EMPTY: dict[int, pl.DataFrame] = {}


def _no_rows(schema: pl.Schema) -> pl.DataFrame:
    """Return an empty frame of ``schema``: a copy of one made once (making one is ~0.1-0.3 ms)."""
    empty = _EMPTY.get(id(schema))  # the schemas are the module-level constants: one id each
    if empty is None:
        empty = _EMPTY[id(schema)] = pl.DataFrame(schema=schema)
    return empty.clone()


_CASTS: dict[int, list[pl.Expr]] = {}


def _cast_to(schema: pl.Schema) -> list[pl.Expr]:
    """Return the columns of ``schema`` cast to their dtypes (as :func:`~timeline.schema.validate`)."""
    casts = _CASTS.get(id(schema))
    if casts is None:
        casts = _CASTS[id(schema)] = [pl.col(name).cast(dtype) for name, dtype in schema.items()]
    return casts


@dataclass(frozen=True)
class CollectiveMatch:
    """Collectives matched across ranks.

    Attributes
    ----------
    collectives
        One row per logical collective (:data:`~timeline.analysis.schemas.COLLECTIVES_SCHEMA`),
        sorted by ``collective_id`` (first start).
    ranks
        One row per logical collective and rank
        (:data:`~timeline.analysis.schemas.COLLECTIVE_RANKS_SCHEMA`).
    mismatches
        Groups where a rank has fewer collectives than another
        (:data:`~timeline.analysis.schemas.COLLECTIVE_MISMATCHES_SCHEMA`); empty when all match.
    warnings
        One line per kind of oddity (count mismatches, collectives that differ across ranks,
        collectives whose group is ambiguous, sends without a receive).
    groups
        One row per process group instance with what was matched on it
        (:data:`~timeline.analysis.schemas.COLLECTIVE_GROUPS_SCHEMA`).
    point_to_point
        One row per send/receive pair (:data:`~timeline.analysis.schemas.POINT_TO_POINT_SCHEMA`),
        sorted by ``pair_id`` (first start).
    ambiguous
        One row per communication event whose group could not be told
        (:data:`~timeline.analysis.schemas.AMBIGUOUS_COLLECTIVES_SCHEMA`): matched across no rank.
    """

    collectives: pl.DataFrame
    ranks: pl.DataFrame
    mismatches: pl.DataFrame
    warnings: tuple[str, ...] = ()
    groups: pl.DataFrame = field(default_factory=lambda: _no_rows(COLLECTIVE_GROUPS_SCHEMA))
    point_to_point: pl.DataFrame = field(default_factory=lambda: _no_rows(POINT_TO_POINT_SCHEMA))
    ambiguous: pl.DataFrame = field(default_factory=lambda: _no_rows(AMBIGUOUS_COLLECTIVES_SCHEMA))


def bus_factor(collective: str | None, ranks: int) -> float | None:
    """Return nccl-tests' bus-bandwidth factor of a collective over ``ranks`` ranks, or None.

    Examples
    --------
    >>> bus_factor("all_reduce", 8), bus_factor("all_to_all", 8), bus_factor("broadcast", 8)
    (1.75, 0.875, 1.0)
    """
    if ranks <= 0 or collective is None:
        return None
    if collective == "all_reduce":
        return 2 * (ranks - 1) / ranks
    if collective in _HALF_FACTOR:
        return (ranks - 1) / ranks
    if collective in _UNIT_FACTOR:
        return 1.0
    return None


def bus_factor_expr(collective: pl.Expr, ranks: pl.Expr) -> pl.Expr:
    """Return :func:`bus_factor` as a polars expression (null for unknown collectives or ``ranks < 1``)."""
    n = ranks.cast(pl.Float64)
    factor = (
        pl.when(collective == "all_reduce")
        .then(2 * (n - 1) / n)
        .when(collective.is_in(_HALF_FACTOR))
        .then((n - 1) / n)
        .when(collective.is_in(_UNIT_FACTOR))
        .then(pl.lit(1.0))
        .otherwise(pl.lit(None, dtype=pl.Float64))
    )
    return pl.when(n >= 1).then(factor).otherwise(pl.lit(None, dtype=pl.Float64))


def _sum_or_null(column: str) -> pl.Expr:
    """Sum of a column, null when every value is null (polars' sum would give 0)."""
    return pl.when(pl.col(column).is_not_null().any()).then(pl.col(column).sum()).otherwise(None)


def attributed_communication(
    events: pl.DataFrame,
    *,
    groups: pl.DataFrame | None = None,
    overrides: Mapping[str, str] | None = None,
    clocks: pl.DataFrame | None = None,
    windows: pl.DataFrame | None = None,
    warnings: list[str] | None = None,
) -> pl.DataFrame:
    """Return the communication events the matching measures, each with its process group.

    The events each rank's overlap analysis measures (collective kernels with a device on GPU
    ranks, CPU collectives on CPU-only ranks; ``wait`` markers dropped), with the columns of
    :func:`~timeline.analysis.groups.attribute_groups` (``group``, ``attributed_by``,
    ``candidates``, ``dimension``, ``peer``), sorted by rank, group and start. ``groups``: the
    process groups the traces declare (:attr:`timeline.trace.Trace.groups`; without them only
    the groups the events name are known); ``clocks``: which ranks' times compare
    (:func:`~timeline.analysis.groups.shared_clocks`; without it no rule compares ranks' times);
    ``windows``: the iteration windows (which steps each rank recorded; computed when not given);
    ``warnings``: a list the attribution's warnings are appended to. The building block of
    :func:`collective_instances` and of the exposure per dimension.
    """
    attributed, _, _ = _attribution(
        events,
        rank_modes(events),
        groups=groups,
        overrides=overrides,
        clocks=clocks,
        windows=windows,
        warnings=warnings,
    )
    return attributed.collect(engine="in-memory")


def _attribution(
    events: pl.DataFrame,
    modes: pl.DataFrame,
    *,
    groups: pl.DataFrame | None,
    overrides: Mapping[str, str] | None,
    clocks: pl.DataFrame | None,
    windows: pl.DataFrame | None,
    warnings: list[str] | None,
) -> tuple[pl.LazyFrame, list[GroupInstance], bool]:
    """Return :func:`attributed_communication` lazily, every group instance, and whether settled.

    ``modes``: :func:`~timeline.analysis.iterations.rank_modes` of ``events``. The instances are
    :func:`~timeline.analysis.groups.group_instances`' (the communication of profiler traces, every
    rank mode), read from the events that name a group in one query with the attribution's.
    Settled: no event's group is in doubt, when that is known without a query (else False).
    """
    mode = pl.col("mode")
    on_device = pl.col("device").is_not_null()
    not_wait = pl.col("collective").is_null() | (pl.col("collective") != "wait")
    measured = (((mode == "gpu") & on_device) | ((mode == "cpu") & ~on_device)) & not_wait
    communication = (
        events.lazy()
        .select(_ATTRIBUTION_COLUMNS)  # selected before the filter: the others are never copied
        .filter((pl.col("kind") == "communication") & (pl.col("source") == "kineto"))
        .join(modes.lazy(), on="rank", how="left", maintain_order="left")
        .with_columns(_measured=measured.fill_null(False))  # a rank without a mode: not measured
        .drop("mode")
        .collect(engine="in-memory")
    )
    declared = groups if groups is not None else _no_rows(PROCESS_GROUPS_SCHEMA)
    if windows is None and clocks is not None:
        windows = assign_iterations(events)
    attributed, instances, settled = _measured_attribution(
        communication,
        declared,
        measured="_measured",
        overrides=overrides,
        clocks=clocks,
        windows=windows,
        warnings=warnings,
    )
    return (
        attributed.with_columns(collective=pl.col("collective").cast(pl.String)).sort(
            "rank", "group", "start_ns", "end_ns", maintain_order=True, nulls_last=True
        ),
        instances,
        settled,
    )


def collective_instances(
    events: pl.DataFrame,
    *,
    groups: pl.DataFrame | None = None,
    overrides: Mapping[str, str] | None = None,
    clocks: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Return each rank's collectives, numbered within their process group instance.

    The building block of :func:`match_collectives` and the clock alignment: the events of
    :func:`attributed_communication` whose group is known (``ambiguous`` ones are left out: they
    are matched across no rank), sends and receives left out (paired by
    :func:`match_point_to_point`), numbered within their group instance by ``comms_id`` when every
    event of the group has one, else by ``seq`` when every event has one, else by order of start
    on each rank. Events sharing a ``comms_id`` or ``seq`` on one rank (coalesced kernels) are one
    instance.

    Parameters
    ----------
    events
        The canonical events frame.
    groups
        The process groups the traces declare (:attr:`timeline.trace.Trace.groups`).
    overrides
        Description → dimension label.
    clocks
        Which ranks' times compare (:func:`~timeline.analysis.groups.shared_clocks`).

    Returns
    -------
    pl.DataFrame
        Columns ``group``, ``dimension``, ``index``, ``matched_by`` (``comms_id``, ``seq`` or
        ``order``), ``attributed_by``, ``rank``, ``collective``, ``events`` (events merged into the
        instance), ``start_ns``, ``end_ns``, ``dur_ns``, ``in_bytes``, ``out_bytes`` (sums over the
        merged events), ``group_size``; sorted by group, index and rank.
    """
    attributed = attributed_communication(events, groups=groups, overrides=overrides, clocks=clocks)
    return _numbered(_with_doubt(attributed.lazy())).drop("_key").collect(engine="in-memory")


def _subsequence() -> pl.Expr:
    """Return the collectives an event's place is counted among, in a group that doubt touches.

    Its kind, and its input size unless the collective may be uneven: the k-th of them on each rank
    of a group is one logical collective whenever the k-th collectives of the group are.
    """
    collective = pl.col("collective")
    return (
        pl.when(collective.is_in(_UNEVEN))
        .then(collective)
        .otherwise(pl.format("{}:{}", collective, pl.col("in_bytes").cast(pl.String).fill_null("?")))
    )


def _with_doubt(attributed: pl.LazyFrame, *, settled: bool = False) -> pl.LazyFrame:
    """Add ``_unordered`` and ``_doubted`` to :func:`attributed_communication`'s events, lazily.

    An event whose group stays ambiguous may be on each of its candidates. So on its rank, the
    place of every later event of a candidate group among the collectives of its kind (and size,
    unless uneven; sends and receives: among the sends or receives of that group) is not certain:
    such an event is ``_unordered``, matched or paired by order with no rank. ``_doubted``: the
    groups that some ambiguous collective may be on (their order is counted per kind and size).
    ``settled``: no event's group is known to be in doubt (both are then false, without a query).
    """
    if settled:
        return attributed.with_columns(_unordered=pl.lit(False), _doubted=pl.lit(False))
    doubt = (
        attributed.filter(pl.col("group").is_null())
        .select("rank", "collective", "in_bytes", "start_ns", group=pl.col("candidates"))
        .explode("group")
        .filter(pl.col("group").is_not_null())
        .collect(engine="in-memory")
    )
    if not doubt.height:
        return attributed.with_columns(_unordered=pl.lit(False), _doubted=pl.lit(False))
    flagged = attributed.with_row_index("_event")
    uneven = pl.col("collective").is_in(_UNEVEN) | pl.col("_doubt_bytes").is_null()
    before = (
        flagged.filter(pl.col("group").is_not_null())
        .select("_event", "rank", "group", "collective", "in_bytes", "start_ns")
        .join(
            doubt.lazy().rename({"in_bytes": "_doubt_bytes", "start_ns": "_doubt_start"}),
            on=["rank", "group", "collective"],
            how="inner",
        )
        .filter(
            (pl.col("_doubt_start") <= pl.col("start_ns"))
            & (uneven | (pl.col("_doubt_bytes") == pl.col("in_bytes")).fill_null(True))
        )
        .select(pl.col("_event").unique())
        .collect(engine="in-memory")
        .get_column("_event")
    )
    doubted = doubt.filter(~pl.col("collective").is_in(_DIRECTED)).get_column("group").unique()
    return flagged.with_columns(
        _unordered=pl.col("_event").is_in(before.implode()),
        _doubted=pl.col("group").is_in(doubted.implode()).fill_null(False),
    ).drop("_event")


def _numbered(attributed: pl.LazyFrame) -> pl.LazyFrame:
    """Return the collectives of :func:`attributed_communication` numbered within their group, lazily.

    ``attributed``: with :func:`_with_doubt`'s columns. By ``comms_id``, else ``seq``, else order:
    the k-th of the group on each rank, or, in a group an ambiguous event may be on, the k-th of its
    kind and size (events whose place doubt leaves uncertain are left out: :func:`_with_doubt`).
    """
    comm = attributed.filter(
        pl.col("group").is_not_null() & ~pl.col("collective").is_in(_DIRECTED).fill_null(False)
    )
    use_comms = pl.col("comms_id").is_not_null().all().over("group")
    use_seq = pl.col("seq").is_not_null().all().over("group")
    by_order = ~(use_comms | use_seq)
    comm = comm.filter(~(by_order & pl.col("_unordered")))
    per_kind = by_order & pl.col("_doubted")
    sub = pl.when(per_kind).then(_subsequence()).otherwise(pl.lit(""))
    comm = comm.with_columns(_sub=sub)
    order = pl.int_range(pl.len(), dtype=pl.Int64).over("rank", "group", "_sub")
    numbered = comm.with_columns(
        _key=pl.when(use_comms)
        .then(pl.format("c{}", pl.col("comms_id")))
        .when(use_seq)
        .then(pl.format("s{}", pl.col("seq")))
        .when(per_kind)
        .then(pl.format("o{}#{}", pl.col("_sub"), order))
        .otherwise(pl.format("o{}", order)),
        _order=order,
        matched_by=pl.when(use_comms)
        .then(pl.lit("comms_id"))
        .when(use_seq)
        .then(pl.lit("seq"))
        .otherwise(pl.lit("order")),
    )
    instances = numbered.group_by("group", "_key", "rank").agg(
        index=pl.when(pl.col("matched_by").first() == "order")
        .then(pl.col("_order").min())
        .otherwise(pl.coalesce(pl.col("seq").min(), pl.col("_order").min())),
        matched_by=pl.col("matched_by").first(),
        attributed_by=pl.col("attributed_by").first(),
        dimension=pl.col("dimension").first(),
        collective=pl.col("collective").drop_nulls().first(),
        events=pl.len().cast(pl.Int32),
        start_ns=pl.col("start_ns").min(),
        end_ns=pl.col("end_ns").max(),
        in_bytes=_sum_or_null("in_bytes"),
        out_bytes=_sum_or_null("out_bytes"),
        group_size=pl.col("group_size").max(),
    )
    return (
        instances.with_columns(dur_ns=pl.col("end_ns") - pl.col("start_ns"))
        .select(_INSTANCE_COLUMNS)
        .sort("group", "index", "_key", "rank")
    )


def bandwidth_columns(link_gbps: float | None, *, time: str = "transfer_ns") -> list[pl.Expr]:
    """Return the rate columns computed from ``bytes``, the ``time`` column (ns) and ``bus_factor``.

    ``algbw_bytes_per_s = bytes / (time / 10⁹)``, ``busbw_bytes_per_s = algbw × bus_factor``, the same
    in Gbit/s (``× 8 / 10⁹``), ``link_gbps`` and ``link_utilisation_ratio = busbw_gbps / link_gbps``;
    null where ``bytes`` is null or ``time`` is not positive. ``implausible``: ``busbw_gbps`` above
    the link, or without one above :data:`~timeline.analysis.links.PHYSICAL_CEILING_GBPS` (a transfer
    faster than physics: its time or its bytes are wrong); false where busbw is unknown.
    """
    usable = pl.col("bytes").is_not_null() & (pl.col(time) > 0)
    algbw = pl.when(usable).then(pl.col("bytes") * 1e9 / pl.col(time))
    busbw = algbw * pl.col("bus_factor")
    link = pl.lit(link_gbps, dtype=pl.Float64)
    ceiling, _ = bandwidth_ceiling(link_gbps)
    return [
        algbw.alias("algbw_bytes_per_s"),
        busbw.alias("busbw_bytes_per_s"),
        (algbw * 8 / 1e9).alias("algbw_gbps"),
        (busbw * 8 / 1e9).alias("busbw_gbps"),
        link.alias("link_gbps"),
        (busbw * 8 / 1e9 / link).alias("link_utilisation_ratio"),
        (busbw * 8 / 1e9 > ceiling).fill_null(False).alias("implausible"),
    ]


def implausible_warning(implausible: int, link_gbps: float | None) -> str | None:
    """Return the warning that counts the transfers faster than physics, or None when there are none.

    Parameters
    ----------
    implausible
        How many collectives (or fused batches) have ``implausible`` set.
    link_gbps
        The link they were measured against (None: the physical ceiling).

    Examples
    --------
    >>> implausible_warning(3, 100.0)[:63]
    '3 transfer(s) faster than the 100 Gbit/s link (bus bandwidth ab'
    """
    if not implausible:
        return None
    _, ceiling = bandwidth_ceiling(link_gbps)
    why = "their time or bytes are wrong"
    if link_gbps is not None:
        why = f"their traffic did not all cross that link, or {why}"
    return (
        f"{implausible} transfer(s) faster than {ceiling} (bus bandwidth above it): left out of link "
        f"utilisation ({why}; implausible = true)"
    )


def match_collectives(
    events: pl.DataFrame,
    *,
    windows: pl.DataFrame | None = None,
    link_gbps: float | None = None,
    world_size: int | None = None,
    groups: pl.DataFrame | None = None,
    overrides: Mapping[str, str] | None = None,
    nodes: pl.DataFrame | None = None,
    clocks: pl.DataFrame | None = None,
    details: bool = True,
) -> CollectiveMatch:
    """Match every collective across the ranks of its process group; pair sends with receives.

    Parameters
    ----------
    events
        The canonical events frame of several ranks (Horovod spans are not matched: they are one
        rank's view; see :mod:`timeline.analysis.horovod_phases`).
    windows
        Iteration windows (:func:`~timeline.analysis.iterations.assign_iterations`); computed when
        not given. A logical collective belongs to the iteration most of its ranks started it in.
    link_gbps
        The link's one-direction bandwidth in Gbit/s (:func:`~timeline.analysis.links.parse_link_gbps`);
        fills ``link_gbps`` and ``link_utilisation_ratio`` (null without); a collective whose bus
        bandwidth is above it (without it: above
        :data:`~timeline.analysis.links.PHYSICAL_CEILING_GBPS`) is ``implausible``, and counted in a
        warning.
    world_size
        The ranks of the job (``distributedInfo.world_size``): the ranks expected in the group of the
        communication without a process group (:data:`ALL_COMMUNICATION_GROUP`), so a collective
        matched on fewer ranks, because the other ranks' traces were not given, is not
        ``complete``. A process group's size counts likewise.
    groups
        The process groups the traces declare (:attr:`timeline.trace.Trace.groups`): the groups an
        event that names none may have run on (:func:`~timeline.analysis.groups.attribute_groups`).
    overrides
        Description → dimension label (``--dimension``).
    nodes
        ``rank`` → ``node`` (:func:`~timeline.analysis.groups.nodes_of`): whether each group spans
        nodes (``spans_nodes``, null without).
    clocks
        Which ranks' times compare (:func:`~timeline.analysis.groups.shared_clocks`): the groups of
        events the traces leave ambiguous are then also told by their timing and pairing (without
        it, only by their gloo worker thread).
    details
        Also pair sends with receives and report the count mismatches, the ambiguous events, the
        groups and the warnings; False: only ``collectives`` and ``ranks`` (the rest empty, no
        warnings), what the diagnosis reads.

    Returns
    -------
    CollectiveMatch

    Examples
    --------
    >>> from timeline import load  # doctest: +SKIP
    >>> trace = load("../shared/traces/kineto/param_dlrm_8rank")  # doctest: +SKIP
    >>> match = match_collectives(trace.events, groups=trace.groups)  # doctest: +SKIP
    >>> match.collectives.select("group", "collective", "start_skew_ns", "last_rank")  # doctest: +SKIP
    """
    events = check_events(events)
    attribution_warnings: list[str] = []
    windows = assign_iterations(events) if windows is None else windows
    modes = rank_modes(events)
    communication, group_list, settled = _attribution(
        events,
        modes,
        groups=groups,
        overrides=overrides,
        clocks=clocks,
        windows=windows,
        warnings=attribution_warnings,
    )
    # computed once (a plan read twice is computed twice): cheaper even when read once
    doubted = _with_doubt(communication.collect(engine="in-memory").lazy(), settled=settled)
    attributed = doubted.collect(engine="in-memory") if details else None  # what the details read
    numbered = _numbered(doubted if attributed is None else attributed.lazy())
    instances = with_iterations(numbered, windows).collect(engine="in-memory")
    measured_ranks = [r for r, mode in modes.select("rank", "mode").iter_rows() if mode in ("gpu", "cpu")]
    known = _instances_frame(group_list, overrides, nodes)
    expected = _expected_ranks(instances, known, len(measured_ranks), world_size)
    collectives, ranks = _measured(instances, expected, link_gbps)
    if attributed is None:
        return CollectiveMatch(
            collectives=collectives, ranks=ranks, mismatches=_no_rows(COLLECTIVE_MISMATCHES_SCHEMA)
        )
    return _with_details(
        collectives,
        ranks,
        attributed=attributed,
        instances=instances,
        known=known,
        measured_ranks=measured_ranks,
        attribution_warnings=tuple(attribution_warnings),
        windows=windows,
        link_gbps=link_gbps,
        nodes=nodes,
    )


def _with_details(
    collectives: pl.DataFrame,
    ranks: pl.DataFrame,
    *,
    attributed: pl.DataFrame,
    instances: pl.DataFrame,
    known: pl.DataFrame,
    measured_ranks: list[int],
    attribution_warnings: tuple[str, ...],
    windows: pl.DataFrame,
    link_gbps: float | None,
    nodes: pl.DataFrame | None,
) -> CollectiveMatch:
    """Return the match with its details: mismatches, point-to-point pairs, ambiguous events, groups."""
    mismatches, warnings = _mismatches(instances, collectives, measured_ranks)
    pairs, p2p_warnings = match_point_to_point(attributed, windows=windows, link_gbps=link_gbps, nodes=nodes)
    ambiguous = _ambiguous(attributed, instances)
    warnings = (
        *warnings,
        *p2p_warnings,
        *attribution_warnings,
        *_ambiguity_warnings(ambiguous, known),
    )
    too_fast = implausible_warning(
        int(collectives.get_column("implausible").sum()) + int(pairs.get_column("implausible").sum()),
        link_gbps,
    )
    if too_fast is not None:
        warnings = (*warnings, too_fast)
    return CollectiveMatch(
        collectives=collectives,
        ranks=ranks,
        mismatches=mismatches,
        warnings=warnings,
        groups=_group_summary(known, attributed, collectives, pairs, ambiguous),
        point_to_point=pairs,
        ambiguous=ambiguous,
    )


def _measured(
    instances: pl.DataFrame, expected: pl.LazyFrame, link_gbps: float | None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Return the collectives and per-rank frames of the instances (``expected``: :func:`_expected_ranks`)."""
    logical = _logical_collectives(instances, expected, plain=True).collect(engine="in-memory")
    if logical.get_column("_varied").any():  # ranks disagree on a kind or an iteration: the most common
        logical = _logical_collectives(instances, expected, plain=False).collect(engine="in-memory")
    per_rank = _per_rank_collectives(instances, logical).select(_cast_to(COLLECTIVE_RANKS_SCHEMA))
    ranks = validate(per_rank.collect(engine="in-memory"), COLLECTIVE_RANKS_SCHEMA, what="collective ranks")
    totals = (
        ranks.lazy()
        .group_by("collective_id")
        .agg(
            bytes=pl.col("bytes").max(),
            max_wait_ns=pl.col("wait_ns").max(),
            total_wait_ns=pl.col("wait_ns").sum(),
        )
    )
    collectives = (
        logical.lazy()
        .join(totals, on="collective_id", how="left")
        .with_columns(bandwidth_columns(link_gbps))
        .sort("collective_id")
        .select(_cast_to(COLLECTIVES_SCHEMA))
    )
    return validate(collectives.collect(engine="in-memory"), COLLECTIVES_SCHEMA, what="collectives"), ranks


def _expected_ranks(
    instances: pl.DataFrame, known: pl.DataFrame, measured: int, world_size: int | None
) -> pl.LazyFrame:
    """Count the ranks expected in each group (lazily): its size, at least the ranks with any collective.

    A group's size is its instance's (``pg_config``'s ``pg_size``, the kernels' ``Group size``, the
    length of its rank list), else the largest ``group_size`` its events carry; for the events of
    :data:`ALL_COMMUNICATION_GROUP`, also every rank whose communication is measured
    (``measured``) and the job's ``world_size``. A subset of a job's traces thus leaves its
    collectives incomplete. ``group_size`` is the size the bus factor uses.
    """
    expected = (
        instances.lazy()
        .group_by("group")
        .agg(
            _seen=pl.col("rank").n_unique().cast(pl.Int32),
            _size=pl.col("group_size").max().cast(pl.Int32),
        )
    )
    expected = expected.join(
        known.lazy().select("group", "spans_nodes", _instance=pl.col("size")), on="group", how="left"
    )
    everyone = pl.max_horizontal(pl.lit(measured, dtype=pl.Int32), pl.lit(world_size or 0, dtype=pl.Int32))
    size = pl.coalesce(pl.col("_instance"), pl.col("_size"))
    return expected.select(
        "group",
        "spans_nodes",
        group_size=size,
        expected_ranks=pl.max_horizontal(
            pl.col("_seen"),
            size.fill_null(0),
            pl.when(pl.col("group") == ALL_COMMUNICATION_GROUP).then(everyone).otherwise(0),
        ).cast(pl.Int32),
    )


def _logical_collectives(instances: pl.DataFrame, expected: pl.LazyFrame, *, plain: bool) -> pl.LazyFrame:
    """Group the instances into logical collectives, lazily, numbered by first start, with skews and checks.

    One row per (group, key): its kind, iteration, ranks, first and last starts and ends, transfer,
    first and last rank, whether it is synchronising, complete and consistent, and its bus factor
    (over the group's size). Its attribution, kind and iteration are the most common of its ranks'
    (the least of those tied); ``plain``: the first known instead, which is the same where its
    ranks have at most one (``_varied`` false) and is much cheaper to find than the most common.
    """
    most_common = {
        name: pl.col(name).drop_nulls().first() if plain else pl.col(name).drop_nulls().mode().sort().first()
        for name in ("attributed_by", "collective", "iteration")
    }
    varied = pl.max_horizontal(
        pl.col(name).drop_nulls().n_unique() for name in ("attributed_by", "collective", "iteration")
    )
    kind_class = (
        pl.when(pl.col("collective").is_in(_POINT_TO_POINT))
        .then(pl.lit("p2p"))
        .otherwise(pl.col("collective"))
    )
    logical = (
        instances.lazy()
        .group_by("group", "_key")
        .agg(
            index=pl.col("index").min(),
            dimension=pl.col("dimension").first(),
            matched_by=pl.col("matched_by").first(),
            **most_common,
            _varied=varied > 1,
            _kinds=kind_class.drop_nulls().n_unique(),
            _sizes=pl.col("in_bytes").drop_nulls().n_unique(),
            ranks=pl.col("rank").n_unique().cast(pl.Int32),
            _event_size=pl.col("group_size").max(),
            first_start_ns=pl.col("start_ns").min(),
            last_start_ns=pl.col("start_ns").max(),
            first_end_ns=pl.col("end_ns").min(),
            last_end_ns=pl.col("end_ns").max(),
            transfer_ns=pl.col("dur_ns").min(),
            first_rank=pl.col("rank").sort_by(["start_ns", "rank"]).first(),
            last_rank=pl.col("rank").sort_by(["start_ns", "rank"], descending=[True, False]).first(),
        )
    )
    return (
        logical.join(expected, on="group", how="left")
        .sort("first_start_ns", "group", "index", "_key")
        .with_row_index("collective_id")
        .with_columns(
            pl.col("collective_id").cast(pl.Int64),
            group_size=pl.coalesce(pl.col("group_size"), pl.col("_event_size")),
            synchronising=pl.col("collective").is_in(list(SYNCHRONISING_COLLECTIVES)).fill_null(False),
            complete=pl.col("ranks") >= pl.col("expected_ranks"),
            consistent=(pl.col("_kinds") <= 1)
            & ((pl.col("_sizes") <= 1) | pl.col("collective").is_in(_UNEVEN).fill_null(False)),
            start_skew_ns=pl.col("last_start_ns") - pl.col("first_start_ns"),
            end_skew_ns=pl.col("last_end_ns") - pl.col("first_end_ns"),
        )
        .with_columns(_n=pl.coalesce(pl.col("group_size"), pl.col("expected_ranks")))
        .with_columns(bus_factor=bus_factor_expr(pl.col("collective"), pl.col("_n")))
    )


def _per_rank_collectives(instances: pl.DataFrame, logical: pl.DataFrame) -> pl.LazyFrame:
    """Measure each rank's part in its logical collective, lazily: bytes, arrival and end lags, wait.

    Bytes by nccl-tests' convention, per rank: the total output for gathers (else input × n),
    nothing for barriers, else the input. Sorted by collective and rank.
    """
    logical_cols = logical.lazy().select(
        "group",
        "_key",
        "collective_id",
        "_n",
        "first_start_ns",
        "first_end_ns",
        "transfer_ns",
        "last_rank",
        _logical_collective="collective",
    )
    collective = pl.col("_logical_collective")
    return (
        instances.lazy()
        .join(logical_cols, on=["group", "_key"], how="inner")
        .with_columns(
            bytes=pl.when(collective.is_in(_GATHERING))
            .then(pl.coalesce(pl.col("out_bytes"), pl.col("in_bytes") * pl.col("_n")))
            .when(collective.is_in(_NO_DATA))
            .then(pl.lit(None, dtype=pl.Int64))
            .otherwise(pl.col("in_bytes")),
            arrival_lag_ns=pl.col("start_ns") - pl.col("first_start_ns"),
            end_lag_ns=pl.col("end_ns") - pl.col("first_end_ns"),
            wait_ns=pl.col("dur_ns") - pl.col("transfer_ns"),
            last=pl.col("rank") == pl.col("last_rank"),
        )
        .sort("collective_id", "rank")
    )


def _mismatches(
    instances: pl.DataFrame, logical: pl.DataFrame, measured_ranks: list[int]
) -> tuple[pl.DataFrame, tuple[str, ...]]:
    """Return the groups and ranks with fewer collectives than the group's most, and warning lines."""
    counts = instances.group_by("group", "rank").agg(collectives=pl.len().cast(pl.Int64))
    most = counts.group_by("group").agg(expected=pl.col("collectives").max())
    # Measured ranks with no communication at all lack every collective of the "*" group.
    if ALL_COMMUNICATION_GROUP in most.get_column("group").to_list():
        silent = [r for r in measured_ranks if r not in set(counts.get_column("rank").to_list())]
        if silent:
            absent = pl.DataFrame(
                {"group": ALL_COMMUNICATION_GROUP, "rank": silent, "collectives": 0},
                schema={"group": pl.String, "rank": counts.schema["rank"], "collectives": pl.Int64},
            )
            counts = pl.concat([counts, absent])
    rows = (
        counts.join(most, on="group")
        .filter(pl.col("collectives") < pl.col("expected"))
        .with_columns(missing=pl.col("expected") - pl.col("collectives"))
        .sort("group", "rank")
    )
    mismatches = validate(rows, COLLECTIVE_MISMATCHES_SCHEMA, what="collective mismatches")
    warnings = [
        f"group {row['group']!r}: rank {row['rank']} has {row['collectives']} collectives, another rank "
        f"{row['expected']}; the collectives it lacks are matched on fewer ranks (complete = false)"
        for row in mismatches.iter_rows(named=True)
    ]
    mismatched = bool(warnings)
    incomplete = logical.filter(~pl.col("complete"))
    untraced = incomplete.filter(pl.col("expected_ranks") > len(measured_ranks))
    if untraced.height:
        largest = int(untraced.get_column("expected_ranks").max())  # type: ignore[arg-type]
        warnings.append(
            f"{untraced.height} logical collective(s) matched on fewer ranks than their group has (up to "
            f"{largest} ranks; the traces of {len(measured_ranks)} were given): the other ranks' traces "
            "were not given, so skew, wait and stragglers cover the given ranks only (complete = false)"
        )
    rest = incomplete.height - untraced.height
    if rest and not mismatched:
        warnings.append(
            f"{rest} logical collectives were seen on fewer ranks than their group has "
            "(ranks without communication events, or traces of a subset of the ranks)"
        )
    inconsistent = logical.filter(~pl.col("consistent")).height
    if inconsistent:
        warnings.append(
            f"{inconsistent} logical collectives differ in kind or size across ranks (consistent = false): "
            "the k-th collectives of the ranks may not be the same operation"
        )
    return mismatches, tuple(warnings)


def match_point_to_point(
    attributed: pl.DataFrame,
    *,
    windows: pl.DataFrame,
    link_gbps: float | None = None,
    nodes: pl.DataFrame | None = None,
) -> tuple[pl.DataFrame, tuple[str, ...]]:
    """Pair each send with its receive: the k-th send from A to B with the k-th receive on B from A.

    Within one process group instance (``*`` when nothing names or declares groups). A send's
    destination and a receive's source are the ``peer`` the trace or the group makes certain
    (:func:`~timeline.analysis.groups.attribute_groups`); sends and receives without one are not
    paired (a warning counts them). Both sides block until the other is there, so, as for
    collectives, the shorter side's duration is the transfer (``transfer_ns``) and each side's
    remainder its wait (``send_wait_ns``, ``recv_wait_ns``); ``start_skew_ns = recv start − send
    start``; bus factor 1 (nccl-tests: ``busbw = algbw`` for send/recv).

    Parameters
    ----------
    attributed
        :func:`attributed_communication` of the events.
    windows
        Iteration windows: a pair belongs to the iteration its send started in (else its receive).
    link_gbps, nodes
        As for :func:`match_collectives`.

    Returns
    -------
    tuple[pl.DataFrame, tuple[str, ...]]
        :data:`~timeline.analysis.schemas.POINT_TO_POINT_SCHEMA` sorted by ``pair_id``, and the
        warnings (sends and receives without a peer, or without their other side).
    """
    if "_unordered" not in attributed.columns:
        attributed = _with_doubt(attributed.lazy()).collect(engine="in-memory")
    p2p = attributed.filter(
        pl.col("group").is_not_null() & pl.col("collective").is_in(_DIRECTED) & ~pl.col("_unordered")
    )
    if not p2p.height:  # most jobs: no sends
        return _no_rows(POINT_TO_POINT_SCHEMA), ()
    no_peer = p2p.filter(pl.col("peer").is_null()).height
    sides = _numbered_sides(p2p.filter(pl.col("peer").is_not_null()))
    pairs = _side(sides, "send", pl.col("in_bytes")).join(
        _side(sides, "recv", pl.coalesce("out_bytes", "in_bytes")),
        on=["group", "src", "dst", "index"],
        how="full",
        coalesce=True,
    )
    pairs = _pair_figures(pairs, windows, nodes).with_columns(bandwidth_columns(link_gbps))
    frame = validate(pairs, POINT_TO_POINT_SCHEMA, what="point to point")
    return frame, _pair_warnings(frame, no_peer)


def _numbered_sides(p2p: pl.DataFrame) -> pl.DataFrame:
    """Return the sends and receives with their source, destination and index among their kind.

    The k-th send from A to B, and the k-th receive on B from A, both have ``index`` k.
    """
    is_send = pl.col("collective") == "send"
    sides = p2p.with_columns(
        src=pl.when(is_send).then(pl.col("rank")).otherwise(pl.col("peer")).cast(pl.Int32),
        dst=pl.when(is_send).then(pl.col("peer")).otherwise(pl.col("rank")).cast(pl.Int32),
    )
    order = pl.int_range(pl.len(), dtype=pl.Int64).over(
        "group", "src", "dst", "collective", order_by=["start_ns", "end_ns"]
    )
    return sides.with_columns(index=order)


def _side(sides: pl.DataFrame, kind: str, nbytes: pl.Expr) -> pl.DataFrame:
    """Return one side of the pairs (``kind``: send or recv), its columns named after it."""
    return sides.filter(pl.col("collective") == kind).select(
        "group",
        "src",
        "dst",
        "index",
        pl.col("dimension").alias(f"_{kind}_dimension"),
        pl.col("start_ns").alias(f"{kind}_start_ns"),
        pl.col("end_ns").alias(f"{kind}_end_ns"),
        nbytes.alias(f"_{kind}_bytes"),
    )


def _pair_figures(pairs: pl.DataFrame, windows: pl.DataFrame, nodes: pl.DataFrame | None) -> pl.DataFrame:
    """Add what a pair measures (:func:`match_point_to_point`): completeness, transfer, waits, node span."""
    send_dur = pl.col("send_end_ns") - pl.col("send_start_ns")
    recv_dur = pl.col("recv_end_ns") - pl.col("recv_start_ns")
    complete = pl.col("send_start_ns").is_not_null() & pl.col("recv_start_ns").is_not_null()
    transfer = pl.when(complete).then(pl.min_horizontal(send_dur, recv_dur))
    with_sides = pairs.lazy().with_columns(
        dimension=pl.coalesce("_send_dimension", "_recv_dimension"),
        complete=complete,
        consistent=pl.col("_send_bytes").is_null()
        | pl.col("_recv_bytes").is_null()
        | (pl.col("_send_bytes") == pl.col("_recv_bytes")),
        bytes=pl.coalesce("_send_bytes", "_recv_bytes"),
        start_skew_ns=pl.col("recv_start_ns") - pl.col("send_start_ns"),
        transfer_ns=transfer,
        send_wait_ns=send_dur - transfer,
        recv_wait_ns=recv_dur - transfer,
        bus_factor=pl.lit(1.0),
        rank=pl.when(pl.col("send_start_ns").is_not_null()).then(pl.col("src")).otherwise(pl.col("dst")),
        start_ns=pl.coalesce("send_start_ns", "recv_start_ns"),
    )
    located = with_iterations(with_sides, windows)
    if nodes is None:
        spans = pl.lit(None, dtype=pl.Boolean)
    else:
        table = nodes.select(pl.col("rank").cast(pl.Int32), "node")
        located = located.join(
            table.lazy().rename({"rank": "src", "node": "_src_node"}), on="src", how="left"
        ).join(table.lazy().rename({"rank": "dst", "node": "_dst_node"}), on="dst", how="left")
        spans = pl.col("_src_node") != pl.col("_dst_node")
    return (
        located.with_columns(spans_nodes=spans)
        .sort("start_ns", "group", "src", "dst", "index")
        .with_row_index("pair_id")
        .with_columns(pl.col("pair_id").cast(pl.Int64))
        .collect(engine="in-memory")
    )


def _pair_warnings(pairs: pl.DataFrame, no_peer: int) -> tuple[str, ...]:
    """Return the warnings of :func:`match_point_to_point`."""
    warnings = []
    if no_peer:
        warnings.append(
            f"{no_peer} send(s)/receive(s) name no peer the trace makes certain (no Dst/Src Rank, no "
            "c10d::send/recv_ argument with record_shapes, or a group of more than two ranks): not paired"
        )
    alone = pairs.filter(~pl.col("complete")).height
    if alone:
        warnings.append(
            f"{alone} send(s)/receive(s) without their other side in the traces given (complete = false): "
            "no transfer or wait for them"
        )
    return tuple(warnings)


def _ambiguous(attributed: pl.DataFrame, instances: pl.DataFrame) -> pl.DataFrame:
    """Return the events matched across no rank for doubt, one row each.

    ``matched_by = "ambiguous"``: their group could not be told (``candidates`` the groups they could
    be on); ``"unordered"``: their group is known (``candidates`` is it) but not their place in its
    order (:func:`_with_doubt`), and neither a ``seq`` nor a ``comms_id`` says it.
    """
    by_order = ~pl.col("group").is_in(
        instances.filter(pl.col("matched_by") != "order").get_column("group").unique().implode()
    )
    unordered = pl.col("group").is_not_null() & pl.col("_unordered") & by_order
    rows = attributed.filter(pl.col("group").is_null() | unordered).with_columns(
        matched_by=pl.when(pl.col("group").is_null())
        .then(pl.lit("ambiguous"))
        .otherwise(pl.lit("unordered")),
        candidates=pl.when(pl.col("group").is_null())
        .then(pl.col("candidates"))
        .otherwise(pl.concat_list(pl.col("group"))),
        group_size=pl.col("group_size").cast(pl.Int32),
        dur_ns=pl.col("end_ns") - pl.col("start_ns"),
    )
    return validate(rows.sort("rank", "start_ns"), AMBIGUOUS_COLLECTIVES_SCHEMA, what="ambiguous collectives")


def _ambiguity_warnings(ambiguous: pl.DataFrame, known: pl.DataFrame) -> tuple[str, ...]:
    """One warning for the events whose group stays ambiguous, one for those whose place does."""
    warnings = []
    doubtful = ambiguous.filter(pl.col("matched_by") == "ambiguous")
    if doubtful.height:
        candidates = sorted(set(doubtful.get_column("candidates").explode().drop_nulls().to_list()))
        described = dict(known.select("group", "pg_desc").iter_rows())
        named = ", ".join(f"{g} ({described.get(g) or 'no description'})" for g in candidates) or "none"
        ranks = doubtful.get_column("rank").n_unique()
        warnings.append(
            f"{doubtful.height} collective(s) on {ranks} rank(s) do not say which process group they ran "
            f"on and several could hold them (groups {named}): not matched across ranks "
            "(matched_by = ambiguous); the trace does not tell them apart (gloo records no group)"
        )
    unordered = ambiguous.filter(pl.col("matched_by") == "unordered")
    if unordered.height:
        warnings.append(
            f"{unordered.height} collective(s) or transfer(s) of a known group whose place in its order "
            "is not: an event before them on their rank, whose group is ambiguous, may be of the same "
            "group and kind; not matched across ranks (matched_by = unordered)"
        )
    return tuple(warnings)


def _group_summary(
    known: pl.DataFrame,
    attributed: pl.DataFrame,
    collectives: pl.DataFrame,
    pairs: pl.DataFrame,
    ambiguous: pl.DataFrame,
) -> pl.DataFrame:
    """One row per group instance (and ``*`` when used): what was matched, paired, left ambiguous on it."""
    used = attributed.filter(pl.col("group").is_not_null())
    extra = (
        used.filter(~pl.col("group").is_in(known.get_column("group").implode()))
        .select("group")
        .unique()
        .with_columns(declared_by=pl.lit(0, dtype=pl.Int32))
    )
    groups = pl.concat([known, extra], how="diagonal_relaxed")
    matched = collectives.group_by("group").agg(
        collectives=pl.len().cast(pl.Int64),
        complete=pl.col("complete").sum().cast(pl.Int64),
        matched_by=pl.col("matched_by").unique().sort().str.join(","),
    )
    how = used.group_by("group").agg(attributed_by=pl.col("attributed_by").unique().sort().str.join(","))
    paired = pairs.group_by("group").agg(point_to_point=pl.len().cast(pl.Int64))
    doubtful = (
        ambiguous.select(group=pl.col("candidates"))
        .explode("group")
        .group_by("group")
        .agg(ambiguous=pl.len().cast(pl.Int64))
    )
    summary = groups
    for part in (matched, how, paired, doubtful):
        summary = summary.join(part, on="group", how="left", maintain_order="left")
    summary = summary.with_columns(
        pl.col("collectives", "complete", "point_to_point", "ambiguous").fill_null(0)
    )
    return validate(summary, COLLECTIVE_GROUPS_SCHEMA, what="collective groups")


def compute_iteration_utilisation(
    collectives: pl.DataFrame,
    *,
    link_gbps: float | None = None,
    windows: pl.DataFrame | None = None,
    iteration_overlap: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Return, per iteration, the bus bandwidth achieved by its collectives and the link utilisation.

    Bytes, bus bytes and transfer time are summed over the collectives whose size, transfer time and
    bus factor are known and whose bandwidth is plausible (``implausible`` false: see
    :func:`bandwidth_columns`); ``collectives`` and ``total_wait_ns`` count them all.

    Parameters
    ----------
    collectives
        :attr:`CollectiveMatch.collectives`.
    link_gbps
        The link's one-direction bandwidth in Gbit/s; without it the link columns are null.
    windows
        Iteration windows (for ``step_ns``, the median window length over ranks); null without.
    iteration_overlap
        :func:`~timeline.analysis.overlap.compute_iteration_overlap` of the same events (for
        ``exposed_comm_ns``, the median over ranks, and ``exposed_link_bytes``); null without.

    Returns
    -------
    pl.DataFrame
        :data:`~timeline.analysis.schemas.ITERATION_UTILISATION_SCHEMA`, sorted by iteration (the
        null iteration, collectives outside every ProfilerStep window, first).
    """
    steps = None
    if windows is not None and windows.height:
        steps = windows.filter(pl.col("window") == "profiler_step").with_columns(
            step_ns=pl.col("end_ns") - pl.col("start_ns")
        )
    exposed = None
    if iteration_overlap is not None and iteration_overlap.height:
        exposed = iteration_overlap.filter(pl.col("iteration").is_not_null())
    per_iteration = _with_median(_sums_per_iteration(collectives), steps, "step_ns")
    per_iteration = _with_median(per_iteration, exposed, "exposed_comm_ns")
    link = pl.lit(link_gbps, dtype=pl.Float64)
    transfer = pl.when(pl.col("transfer_ns") > 0).then(pl.col("transfer_ns"))
    result = per_iteration.with_columns(
        algbw_gbps=pl.col("bytes") * 8 / transfer,
        busbw_gbps=pl.col("bus_bytes") * 8 / transfer,
        link_gbps=link,
    ).with_columns(
        link_utilisation_ratio=pl.col("busbw_gbps") / link,
        step_link_utilisation_ratio=pl.when(pl.col("step_ns") > 0).then(
            pl.col("bus_bytes") * 8 / (pl.col("step_ns") * link)
        ),
        exposed_link_bytes=pl.col("exposed_comm_ns") * link / 8,
    )
    return validate(
        result.sort("iteration", nulls_last=False), ITERATION_UTILISATION_SCHEMA, what="utilisation"
    )


def _sums_per_iteration(collectives: pl.DataFrame) -> pl.DataFrame:
    """Return the collectives, bytes, bus bytes, transfer and wait of each iteration.

    Bytes, bus bytes and transfer count the collectives whose size, transfer and bus factor are
    known and whose bandwidth is plausible; ``collectives`` and ``total_wait_ns`` count them all.
    """
    usable = (
        pl.col("bytes").is_not_null()
        & (pl.col("transfer_ns") > 0)
        & pl.col("bus_factor").is_not_null()
        & ~pl.col("implausible")  # faster than physics: its time or bytes are wrong
    )
    return collectives.group_by("iteration").agg(
        collectives=pl.len().cast(pl.Int64),
        bytes=pl.col("bytes").filter(usable).sum(),
        bus_bytes=(pl.col("bytes").cast(pl.Float64) * pl.col("bus_factor")).filter(usable).sum(),
        transfer_ns=pl.col("transfer_ns").filter(usable).sum(),
        total_wait_ns=pl.col("total_wait_ns").sum(),
    )


def _with_median(per_iteration: pl.DataFrame, rows: pl.DataFrame | None, column: str) -> pl.DataFrame:
    """Add ``column``: its median over ``rows`` of each iteration, rounded (null without ``rows``)."""
    if rows is None:
        return per_iteration.with_columns(pl.lit(None, dtype=pl.Int64).alias(column))
    medians = rows.group_by("iteration").agg(pl.col(column).median().round().cast(pl.Int64))
    return per_iteration.join(medians, on="iteration", how="left")
