"""Process groups, the parallelism dimension each one serves, and the group each collective ran on.

A process group is named by torch (``pg_name``: ``"0"``, ``"1"``, … or a hash) and described by the
job (``pg_desc``: ``mesh_tp``, ``mesh_dp_shard`` for a DeviceMesh dimension; Megatron's
``TENSOR_MODEL_PARALLEL_GROUP,0``; ``default_pg`` for the world; ``undefined`` when the job gave no
description). The *dimension* of a group is a short label read from its description by one rule,
never from a fixed list of known names, so any mesh dimension a job names gets its own label.

Takes the communication events and the groups the traces declare (:attr:`timeline.trace.Trace.groups`)
and gives:

- the *group instances* (:func:`group_instances`): one per ``pg_name`` and rank set, from
  ``distributedInfo.pg_config`` and from the events' own ``Process Group Name`` / ``Ranks``
  (:data:`~timeline.analysis.schemas.GROUP_INSTANCES_SCHEMA`), each with its dimension, size,
  backend and whether its ranks span nodes;
- the group of each communication event (:func:`attribute_groups`), from what is certain only:
  the group the event names (``named``); else, among the groups its rank belongs to (its own
  ``pg_config``), the only one (``only_group``), the only one of the event's size (``size``) or
  the only one holding its peer (``peer``). When several remain the event is ``ambiguous`` (its
  ``candidates`` are listed) and is matched across no rank; when nothing declares any group and no
  event names one, every event of a rank forms the one sequence of earlier versions
  (``group = "*"``, ``attributed_by = "none"``).

Every rule is defined in ``docs/collectives.md`` (Process groups and dimensions).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from timeline.analysis.dimension_labels import (
    UNDESCRIBED,
    WORLD_DIMENSION,
    dimension_of,
    parse_dimension_overrides,
)
from timeline.analysis.group_inference import INFERRED, RankClock, infer_groups, peer_in_group
from timeline.analysis.schemas import GROUP_INSTANCES_SCHEMA, SHARED_CLOCKS_SCHEMA
from timeline.importers.groups import parse_ranks
from timeline.schema import validate

__all__ = [
    "ALL_COMMUNICATION_GROUP",
    "ATTRIBUTIONS",
    "UNDESCRIBED",
    "WORLD_DIMENSION",
    "GroupInstance",
    "attribute_groups",
    "dimension_of",
    "group_instances",
    "nodes_of",
    "parse_dimension_overrides",
    "shared_clocks",
]

ALL_COMMUNICATION_GROUP = "*"
"""The ``group`` of communication events when nothing names or declares a process group: all of a
rank's collectives form one sequence (what timeline did before it knew groups)."""

ATTRIBUTIONS = ("named", "only_group", "size", "peer", *INFERRED, "none", "ambiguous")
"""How an event's group is known (``attributed_by``); see :func:`attribute_groups`."""


@dataclass
class GroupInstance:
    """One process group instance: a ``pg_name`` with one rank set.

    ``ranks`` are the known members, in the trace's order (a group-local rank indexes them);
    ``truncated``: the list was cut short, so members beyond it are unknown.
    """

    pg_name: str
    ranks: tuple[int, ...]
    truncated: bool
    size: int | None = None
    pg_desc: str | None = None
    backend: str | None = None
    declared_by: set[int] = field(default_factory=set)
    named: bool = False
    """Whether events name it (their ``Process Group Name``)."""
    group: str = ""

    def may_hold(self, rank: int) -> bool:
        """Whether ``rank`` is a member, or may be one (a list cut short)."""
        return rank in self.ranks or self.truncated

    def holds(self, rank: int) -> bool:
        """Whether ``rank`` is certainly a member."""
        return rank in self.ranks

    def complete(self) -> bool:
        """Whether every member is known."""
        return not self.truncated and bool(self.ranks)

    def members(self) -> tuple[int, ...] | None:
        """Every member, in group order, or None when they are not all known."""
        return self.ranks if self.complete() else None


def _merge(
    instances: list[GroupInstance], *, pg_desc: str | None, size: int | None, backend: str | None
) -> None:
    """Fill what the first instance lacks from another source."""
    target = instances[0]
    target.pg_desc = target.pg_desc or pg_desc
    target.size = target.size or size
    target.backend = target.backend or backend


class _Registry:
    """The group instances met so far, by name; merges a list cut short into the full one it begins."""

    def __init__(self) -> None:
        self.by_name: dict[str, list[GroupInstance]] = {}

    def find(self, pg_name: str, ranks: tuple[int, ...], truncated: bool) -> GroupInstance | None:
        """Return the instance of this name and rank set (a cut list matches the full list it begins)."""
        for known in self.by_name.get(pg_name, []):
            if (known.ranks, known.truncated) == (ranks, truncated):
                return known
            if truncated and not known.truncated and known.ranks[: len(ranks)] == ranks:
                return known
            if known.truncated and not truncated and ranks[: len(known.ranks)] == known.ranks:
                known.ranks, known.truncated = ranks, False
                return known
        return None

    def add(
        self,
        pg_name: str,
        ranks: tuple[int, ...],
        truncated: bool,
        *,
        pg_desc: str | None = None,
        size: int | None = None,
        backend: str | None = None,
    ) -> GroupInstance:
        """Return the instance of this name and rank set, made if new, filled with what it lacked."""
        found = self.find(pg_name, ranks, truncated)
        if found is None:
            found = GroupInstance(pg_name=pg_name, ranks=ranks, truncated=truncated)
            self.by_name.setdefault(pg_name, []).append(found)
        _merge([found], pg_desc=pg_desc, size=size, backend=backend)
        return found

    def holding(self, pg_name: str, rank: int) -> list[GroupInstance]:
        """Return the instances of this name that hold (or may hold) ``rank``."""
        return [g for g in self.by_name.get(pg_name, []) if g.may_hold(rank)]

    def all(self) -> list[GroupInstance]:
        """Every instance, with its ``group`` id set: the name, or the name and ranks when names repeat."""
        out = [g for groups in self.by_name.values() for g in groups]
        for name, groups in self.by_name.items():
            for g in groups:
                if len(groups) == 1:
                    g.group = name
                else:
                    listed = ",".join(map(str, g.ranks)) + (",..." if g.truncated else "")
                    g.group = f"{name}[{listed}]"
        return sorted(out, key=lambda g: _natural(g.group))


def _natural(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that puts ``"2"`` before ``"10"`` (group names are numbers in creation order)."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", text) if part)


def _named_events(comm: pl.LazyFrame, *, flag: str | None = None) -> pl.DataFrame:
    """Return the distinct (rank, name, ranks, description, size) of the events that name a group.

    With ``flag`` (a Boolean column of ``comm``), also that column: whether any of the events with
    those values has it. Sorted by the five, nulls last; one query.
    """
    keys = [
        "rank",
        pl.col("pg_name").cast(pl.String),
        "pg_ranks",
        pl.col("pg_desc").cast(pl.String),
        "group_size",
    ]
    named = comm.filter(pl.col("pg_name").is_not_null())
    distinct = named.group_by(keys).agg(pl.col(flag).any()) if flag else named.select(keys).unique()
    return distinct.sort(["rank", "pg_name", "pg_ranks", "pg_desc", "group_size"], nulls_last=True).collect(
        engine="in-memory"
    )


def _registry(
    named_events: Iterable[Mapping[str, Any]], declared: pl.DataFrame
) -> tuple[_Registry, dict[int, list[GroupInstance]]]:
    """Build the group instances from the declared groups and the rows of :func:`_named_events`.

    Return them and, per rank, the instances its own trace declares.
    """
    registry = _Registry()
    own: dict[int, list[GroupInstance]] = {}
    for row in declared.iter_rows(named=True):
        if row["pg_name"] is None:
            continue
        instance = registry.add(
            row["pg_name"],
            tuple(row["ranks"] or ()),
            bool(row["ranks_truncated"]),
            pg_desc=row["pg_desc"],
            size=row["pg_size"],
            backend=row["backend"],
        )
        if row["rank"] is not None:
            instance.declared_by.add(row["rank"])
            own.setdefault(row["rank"], []).append(instance)
    for event in named_events:
        parsed = parse_ranks(event["pg_ranks"]) if event["pg_ranks"] is not None else None
        if parsed is not None:
            ranks, truncated = tuple(parsed[0]), parsed[1]
            named = registry.add(
                event["pg_name"], ranks, truncated, pg_desc=event["pg_desc"], size=event["group_size"]
            )
            named.named = True
            continue
        holding = registry.holding(event["pg_name"], event["rank"])
        if len(holding) == 1:
            _merge(holding, pg_desc=event["pg_desc"], size=event["group_size"], backend=None)
            holding[0].named = True
        elif not holding:  # a group no trace lists: members unknown
            named = registry.add(
                event["pg_name"], (), True, pg_desc=event["pg_desc"], size=event["group_size"]
            )
            named.named = True
    for instance in registry.all():
        if instance.size is None and instance.complete():
            instance.size = len(instance.ranks)
    registry.all()  # ids once every instance is known
    return registry, own


def nodes_of(files: pl.DataFrame, *, gpus_per_node: int | None = None) -> pl.DataFrame:
    """Return the node of each rank: ``rank // gpus_per_node``, else the host its trace names.

    Parameters
    ----------
    files
        The file table (:attr:`timeline.trace.Trace.files`): ``rank`` and ``host`` (the trace's
        ``host_name``).
    gpus_per_node
        Ranks per node, numbered node by node (torchrun's layout): given, it decides alone.

    Returns
    -------
    pl.DataFrame
        ``rank`` (Int32), ``node`` (String); ranks whose node is unknown are absent. Process ids do
        not tell hosts apart (containers on one host repeat them), so they are not used.
    """
    return _nodes(files, gpus_per_node).collect(engine="in-memory")


def _nodes(files: pl.DataFrame, gpus_per_node: int | None) -> pl.LazyFrame:
    """Return :func:`nodes_of`, lazily (one query with what reads it)."""
    ranks = files.lazy().filter(pl.col("rank").is_not_null() & (pl.col("format") != "horovod"))
    if gpus_per_node is not None:
        return (
            ranks.select(pl.col("rank").cast(pl.Int32))
            .unique()
            .sort("rank")
            .with_columns(node=(pl.col("rank") // gpus_per_node).cast(pl.String))
        )
    return (
        ranks.filter(pl.col("host").is_not_null())
        .group_by("rank")
        .agg(node=pl.col("host").unique())
        .filter(pl.col("node").list.len() == 1)  # a rank whose files name two hosts: unknown
        .select(pl.col("rank").cast(pl.Int32), pl.col("node").list.first())
        .sort("rank")
    )


def shared_clocks(
    files: pl.DataFrame,
    *,
    gpus_per_node: int | None = None,
    offsets: pl.DataFrame | None = None,
    comparable: bool = True,
) -> pl.DataFrame:
    """Return which ranks' times compare: the ranks of one node, or every rank an alignment moved.

    Ranks on one node read one clock (:func:`nodes_of`: ``rank // gpus_per_node``, else the host
    the trace names) when their traces count time the same way (the file table's ``clock``).
    After ``--align`` (``offsets``) every rank with an offset is on the reference clock, within
    an uncertainty of twice its ``mad_ns`` (an alignment is an estimate); a rank without one
    compares with none.

    Parameters
    ----------
    files
        :attr:`timeline.trace.Trace.files`.
    gpus_per_node
        Ranks per node (``--gpus-per-node``).
    offsets
        :func:`~timeline.analysis.alignment.estimate_clock_offsets`, when the events were moved by
        them.
    comparable
        False when the traces' clocks cannot be compared at all
        (:attr:`timeline.trace.Trace.clock_note`, without alignment): no rank compares.

    Returns
    -------
    pl.DataFrame
        :data:`~timeline.analysis.schemas.SHARED_CLOCKS_SCHEMA`: ``rank``, ``clock`` (ranks with the
        same value compare), ``uncertainty_ns``; ranks absent compare with none.
    """
    if offsets is not None:
        shared = offsets.filter(pl.col("offset_ns").is_not_null()).select(
            pl.col("rank").cast(pl.Int32),
            clock=pl.lit("aligned"),
            uncertainty_ns=(2 * pl.col("mad_ns").fill_null(0)).cast(pl.Int64),
        )
        return validate(shared.sort("rank"), SHARED_CLOCKS_SCHEMA, what="shared clocks")
    if not comparable:
        return pl.DataFrame(schema=SHARED_CLOCKS_SCHEMA)
    clocks = (
        _nodes(files, gpus_per_node)
        .join(_counting(files), on="rank", how="inner")
        .select(
            "rank",
            clock=pl.format("{}/{}", pl.col("node"), pl.col("_counting").fill_null("?")),
            uncertainty_ns=pl.lit(0, dtype=pl.Int64),
        )
        .sort("rank")
        .select([pl.col(name).cast(dtype) for name, dtype in SHARED_CLOCKS_SCHEMA.items()])
    )
    return validate(clocks.collect(engine="in-memory"), SHARED_CLOCKS_SCHEMA, what="shared clocks")


def _counting(files: pl.DataFrame) -> pl.LazyFrame:
    """Return how each rank's traces count time (``_counting``, the file table's ``clock``), lazily.

    A rank whose files count time two ways is absent: it compares with none.
    """
    return (
        files.lazy()
        .filter(pl.col("rank").is_not_null() & (pl.col("format") != "horovod"))
        .group_by(pl.col("rank").cast(pl.Int32))
        .agg(pl.col("clock").unique())
        .filter(pl.col("clock").list.len() == 1)
        .select("rank", pl.col("clock").list.first().alias("_counting"))
    )


def _span(
    ranks: Iterable[int], complete: bool, nodes: Mapping[int, str] | None
) -> tuple[int | None, bool | None]:
    """Return (nodes, spans more than one) of a rank set: null when a member's node is unknown."""
    if nodes is None:
        return None, None
    members = list(ranks)
    seen = {nodes[r] for r in members if r in nodes}
    if len(seen) > 1:
        return len(seen), True  # two nodes among the known: spans, whatever the others
    if not complete or any(r not in nodes for r in members) or not members:
        return None, None
    return len(seen), False


def group_instances(
    events: pl.DataFrame,
    declared: pl.DataFrame,
    *,
    overrides: Mapping[str, str] | None = None,
    nodes: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Return every process group instance: from ``pg_config`` and from the events that name a group.

    An instance is one ``pg_name`` with one rank set: the same name with other ranks (groups made by
    each rank on its own) is another instance, whose ``group`` id then lists its ranks
    (``"1[0,2]"``). A list cut short (``...``) is the instance whose full list it begins.

    Parameters
    ----------
    events
        The canonical events frame (its communication events are read).
    declared
        The groups the traces declare (:attr:`timeline.trace.Trace.groups`).
    overrides
        Description → dimension label (:func:`parse_dimension_overrides`).
    nodes
        ``rank`` → ``node`` (:func:`nodes_of`); without it ``hosts`` and ``spans_nodes`` are null.

    Returns
    -------
    pl.DataFrame
        :data:`~timeline.analysis.schemas.GROUP_INSTANCES_SCHEMA`, sorted by ``group`` (numbers in
        numeric order: ``"2"`` before ``"10"``).
    """
    registry, _ = _registry(_named_events(_communication(events.lazy())).iter_rows(named=True), declared)
    return _instances_frame(registry.all(), overrides, nodes)


def _instances_frame(
    instances: list[GroupInstance], overrides: Mapping[str, str] | None, nodes: pl.DataFrame | None
) -> pl.DataFrame:
    """Return :func:`group_instances`' frame of these instances (``nodes``: :func:`nodes_of`)."""
    node_map = None
    if nodes is not None:  # no query: the columns as they are
        node_map = dict(
            zip(nodes.get_column("rank").to_list(), nodes.get_column("node").to_list(), strict=True)
        )
    rows = []
    for g in instances:
        hosts, spans = _span(g.ranks, g.complete(), node_map)
        rows.append(
            {
                "group": g.group,
                "pg_name": g.pg_name,
                "pg_desc": g.pg_desc,
                "dimension": dimension_of(g.pg_desc, overrides=overrides),
                "ranks": list(g.ranks),
                "ranks_truncated": g.truncated,
                "size": g.size,
                "backend": g.backend,
                "declared_by": len(g.declared_by),
                "hosts": hosts,
                "spans_nodes": spans,
            }
        )
    return validate(pl.DataFrame(rows, schema=GROUP_INSTANCES_SCHEMA), GROUP_INSTANCES_SCHEMA, what="groups")


def _communication(events: pl.LazyFrame) -> pl.LazyFrame:
    """Return the communication events of profiler traces."""
    return events.filter((pl.col("kind") == "communication") & (pl.col("source") == "kineto"))


_ATTRIBUTION_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32(),
        "pg_name": pl.String(),
        "pg_ranks": pl.String(),
        "size_hint": pl.Int32(),
        "peer": pl.Int32(),
        "group_peer": pl.Int32(),
        "group": pl.String(),
        "attributed_by": pl.String(),
        "candidates": pl.List(pl.String()),
        "resolved_peer": pl.Int32(),
        "_closed": pl.Boolean(),
    }
)


def _size_hint() -> pl.Expr:
    """Return the group size an event states, where it states one.

    ``group_size``, else an all-gather's output over its input (a reduce-scatter's input over its
    output) when the ratio is a whole number above 1.
    """
    ratio_of = {"all_gather": ("out_bytes", "in_bytes"), "reduce_scatter": ("in_bytes", "out_bytes")}
    ratio = pl.lit(None, dtype=pl.Int64)
    for collective, (big, small) in ratio_of.items():
        exact = (pl.col(small) > 0) & (pl.col(big) % pl.col(small) == 0) & (pl.col(big) > pl.col(small))
        ratio = (
            pl.when((pl.col("collective") == collective) & exact)
            .then(pl.col(big) // pl.col(small))
            .otherwise(ratio)
        )
    return pl.coalesce(pl.col("group_size").cast(pl.Int64), ratio).cast(pl.Int32, strict=False)


@dataclass(frozen=True)
class _Key:
    rank: int
    pg_name: str | None
    pg_ranks: str | None
    size_hint: int | None
    peer: int | None
    group_peer: int | None


def _attribute(
    key: _Key, registry: _Registry, own: Mapping[int, list[GroupInstance]], anything: bool
) -> dict[str, object]:
    """Attribute one kind of event (:func:`attribute_groups`' rules); return its group columns."""
    if key.pg_name is not None:
        parsed = parse_ranks(key.pg_ranks) if key.pg_ranks is not None else None
        if parsed is not None:
            found = registry.find(key.pg_name, tuple(parsed[0]), parsed[1])
            candidates = [found] if found is not None else []
        else:
            candidates = registry.holding(key.pg_name, key.rank)
        return {**_decided(key, candidates, "named"), "_closed": True}
    if not anything:
        return {**_everything(key), "_closed": False}
    mine = own.get(key.rank)
    complete_list = mine is not None
    everyone = [g for gs in registry.by_name.values() for g in gs]
    if mine is not None:  # its own pg_config, and groups created since that events name
        base = [*mine, *(g for g in everyone if g.named and g.holds(key.rank) and g not in mine)]
    else:
        base = [g for g in everyone if g.may_hold(key.rank)]
    if not base and not complete_list:
        return {**_everything(key), "_closed": False}
    how = "only_group"
    candidates = base
    if key.size_hint is not None and len(candidates) > 1:
        candidates = [g for g in candidates if g.size is None or g.size == key.size_hint]
        how = "size"
    if len(candidates) > 1 and (key.peer is not None or key.group_peer is not None):
        candidates = [g for g in candidates if _could_reach(g, key)]
        how = "peer"
    if not complete_list:
        return {**_ambiguous(key, candidates), "_closed": False}  # the rank's own list of groups is unknown
    return {**_decided(key, candidates, how), "_closed": True}


def _everything(key: _Key) -> dict[str, object]:
    """Return the group of an event when nothing names or declares one: ``*``, all of its rank's."""
    return {
        "group": ALL_COMMUNICATION_GROUP,
        "attributed_by": "none",
        "candidates": [],
        "resolved_peer": key.peer,
    }


def _could_reach(group: GroupInstance, key: _Key) -> bool:
    """Whether a send or receive of ``key`` could run on ``group``: it holds the rank and the peer."""
    if key.peer is not None:
        return group.may_hold(key.peer)
    assert key.group_peer is not None
    if group.truncated:
        return True
    return key.group_peer < len(group.ranks) and group.ranks[key.group_peer] != key.rank


def _decided(key: _Key, candidates: list[GroupInstance], how: str) -> dict[str, object]:
    if len(candidates) != 1:
        return _ambiguous(key, candidates)
    (group,) = candidates
    return {
        "group": group.group,
        "attributed_by": how,
        "candidates": [group.group],
        "resolved_peer": _peer(group, key),
    }


def _ambiguous(key: _Key, candidates: list[GroupInstance]) -> dict[str, object]:
    return {
        "group": None,
        "attributed_by": "ambiguous",
        "candidates": sorted(g.group for g in candidates),
        "resolved_peer": key.peer,
    }


def _peer(group: GroupInstance, key: _Key) -> int | None:
    """Return the global rank of a send's or receive's other side, once its group is known."""
    return peer_in_group(group.members(), key.rank, key.peer, key.group_peer)


def attribute_groups(
    events: pl.DataFrame,
    declared: pl.DataFrame,
    *,
    overrides: Mapping[str, str] | None = None,
    clocks: pl.DataFrame | None = None,
    windows: pl.DataFrame | None = None,
    warnings: list[str] | None = None,
) -> pl.DataFrame:
    """Return the communication events of ``events`` with the process group each one ran on.

    The rules, first that applies (``attributed_by``):

    - ``named``: the event names its group (``pg_name``, with ``pg_ranks`` when the name has
      several rank sets, else the instance of that name holding the event's rank);
    - nothing declares a group and no event names one: ``group = "*"``, ``none`` (all of a rank's
      communication is one sequence, as before timeline knew groups);
    - the groups the rank's own trace declares (its ``pg_config``: every group it belongs to), and
      the groups events name that hold it: ``only_group`` when there is one; ``size`` when one is
      left once those of another size than the event states are dropped (``group_size``, or an
      all-gather's output over its input); ``peer`` when one holds both the rank and the peer of a
      send or receive;
    - then, across ranks and threads (:mod:`timeline.analysis.group_inference`, repeated until
      nothing changes): ``timing`` when the other groups' members have no overlapping instance of a
      synchronising collective; ``thread`` when the other events of its gloo worker thread rule the
      other groups out; ``pairing`` when the other groups' peers have no receive (send) for a send
      (receive);
    - otherwise ``ambiguous``: ``group`` null, ``candidates`` the groups it could have run on (a
      rank whose trace declares no groups has an unknown list: never attributed by elimination).

    Parameters
    ----------
    events
        The canonical events frame.
    declared
        :attr:`timeline.trace.Trace.groups`.
    overrides
        Description → dimension label.
    clocks
        Which ranks' times compare (:func:`shared_clocks`); without it the timing and pairing
        rules compare no ranks (the thread rule, within one rank, still applies).
    windows
        The iteration windows (:func:`~timeline.analysis.iterations.assign_iterations`): which
        steps each rank recorded, so that a rank is asked only about the steps it recorded.
    warnings
        A list the attribution's warnings are appended to (rules that contradicted each other).

    Returns
    -------
    pl.DataFrame
        The communication events of profiler traces (every column of ``events``) with ``group``,
        ``attributed_by``, ``candidates`` (List(String)), ``dimension`` and ``peer`` resolved to a
        global rank where the group makes it certain (a gloo send's ``group_peer`` through the
        group's ranks).
    """
    comm = _communication(events.lazy()).collect(engine="in-memory").lazy()  # read twice: computed once
    registry, own = _registry(_named_events(comm).iter_rows(named=True), declared)
    return _attributed(  # [0]: the events (whether their groups are settled is not asked)
        comm, registry, own, overrides=overrides, clocks=clocks, windows=windows, warnings=warnings
    )[0].collect(engine="in-memory")


def _measured_attribution(
    communication: pl.DataFrame,
    declared: pl.DataFrame,
    *,
    measured: str,
    overrides: Mapping[str, str] | None,
    clocks: pl.DataFrame | None,
    windows: pl.DataFrame | None,
    warnings: list[str] | None,
) -> tuple[pl.LazyFrame, list[GroupInstance], bool]:
    """Attribute the events of ``communication`` that the Boolean column ``measured`` keeps.

    ``communication``: the communication events of profiler traces. Return
    :func:`attribute_groups` of the kept events (without ``measured``), lazily, whether their
    groups are settled (:func:`_attributed`), and the group instances of all the events
    (:func:`group_instances`' registry, for :func:`_instances_frame`): the events that name a
    group are read once for both.
    """
    named = list(_named_events(communication.lazy(), flag=measured).iter_rows(named=True))
    registry, own = _registry((row for row in named if row[measured]), declared)
    everything, _ = _registry(named, declared)
    comm = communication.lazy().filter(pl.col(measured)).drop(measured)
    attributed, settled = _attributed(
        comm, registry, own, overrides=overrides, clocks=clocks, windows=windows, warnings=warnings
    )
    return attributed, everything.all(), settled


def _attributed(
    comm: pl.LazyFrame,
    registry: _Registry,
    own: Mapping[int, list[GroupInstance]],
    *,
    overrides: Mapping[str, str] | None,
    clocks: pl.DataFrame | None,
    windows: pl.DataFrame | None,
    warnings: list[str] | None,
) -> tuple[pl.LazyFrame, bool]:
    """Return :func:`attribute_groups` of the communication events ``comm``, lazily, and whether settled.

    ``registry`` and ``own``: :func:`_registry` of the declared groups and of ``comm``'s named events.
    Settled: no event's group stays in doubt among candidates (none is null with candidates), known
    without a query when no rule across ranks ran (else False: not known).
    """
    anything = bool(registry.by_name)
    keyed = comm.with_columns(size_hint=_size_hint(), pg_name_s=pl.col("pg_name").cast(pl.String))
    keys = (
        keyed.select(
            "rank", pl.col("pg_name_s").alias("pg_name"), "pg_ranks", "size_hint", "peer", "group_peer"
        )
        .unique()
        .collect(engine="in-memory")
    )
    rows = []
    for values in keys.iter_rows(named=True):
        key = _Key(**values)
        rows.append({**values, **_attribute(key, registry, own, anything)})
    table = pl.DataFrame(rows, schema=_ATTRIBUTION_SCHEMA)
    instances = registry.all()
    dimensions = pl.DataFrame(
        [{"group": g.group, "dimension": dimension_of(g.pg_desc, overrides=overrides)} for g in instances],
        schema={"group": pl.String, "dimension": pl.String},
    )
    attributed = keyed.join(
        table.lazy().rename({"pg_name": "pg_name_s"}),
        on=["rank", "pg_name_s", "pg_ranks", "size_hint", "peer", "group_peer"],
        how="left",
        nulls_equal=True,
        maintain_order="left",
    )
    # every key is some event's: an event is closed and ambiguous when a key is
    settled = all(row["group"] is not None or not row["candidates"] for row in rows)
    if anything and any(row["_closed"] and row["attributed_by"] == "ambiguous" for row in rows):
        members = {g.group: g.members() for g in instances}
        attributed = _inferred(
            attributed.collect(engine="in-memory"), members, _clock_map(clocks), windows, warnings
        ).lazy()
        settled = False
    frame = (
        attributed.join(dimensions.lazy(), on="group", how="left", maintain_order="left")
        .with_columns(peer=pl.col("resolved_peer"))
        .drop("pg_name_s", "resolved_peer", "size_hint", "_closed")
    )
    return frame, settled


def _clock_map(clocks: pl.DataFrame | None) -> dict[int, RankClock]:
    """Rank → :class:`~timeline.analysis.group_inference.RankClock` from a :func:`shared_clocks` frame."""
    if clocks is None:
        return {}
    return {
        rank: RankClock(clock, uncertainty or 0)
        for rank, clock, uncertainty in clocks.select("rank", "clock", "uncertainty_ns").iter_rows()
    }


def _inferred(
    attributed: pl.DataFrame,
    members: Mapping[str, tuple[int, ...] | None],
    clocks: Mapping[int, RankClock],
    windows: pl.DataFrame | None,
    warnings: list[str] | None,
) -> pl.DataFrame:
    """Narrow the ambiguous events' candidates across ranks and threads (:func:`infer_groups`)."""
    absent = [
        pl.lit(None, dtype=dtype).alias(name)
        for name, dtype in (("name", pl.String), ("pid", pl.Int64), ("tid", pl.Int64), ("device", pl.Int32))
        if name not in attributed.columns
    ]
    numbered = attributed.with_columns(absent).with_row_index("_row")
    view = numbered.select(
        "_row",
        "rank",
        pl.col("name").cast(pl.String),
        "pid",
        "tid",
        "device",
        pl.col("collective").cast(pl.String),
        "in_bytes",
        "start_ns",
        "end_ns",
        "candidates",
        "_closed",
        "peer",
        "group_peer",
    )
    found = infer_groups(view, members, clocks, windows=windows)
    if warnings is not None:
        warnings.extend(found.warnings)
    if not found.candidates:
        return attributed
    changes = pl.DataFrame(
        {
            "_row": list(found.candidates),
            "_candidates": list(found.candidates.values()),
            "_how": [found.decided_by.get(row) for row in found.candidates],
        },
        schema={"_row": pl.UInt32, "_candidates": pl.List(pl.String), "_how": pl.String},
    )
    decided = pl.col("_how").is_not_null()
    chosen = pl.col("_candidates").list.first()
    updated = numbered.join(changes, on="_row", how="left", maintain_order="left").with_columns(
        candidates=pl.coalesce("_candidates", "candidates"),
        group=pl.when(decided).then(chosen).otherwise(pl.col("group")),
        attributed_by=pl.when(decided).then(pl.col("_how")).otherwise(pl.col("attributed_by")),
    )
    peers = [
        peer_in_group(members.get(group), rank, peer, group_peer) if how is not None else resolved
        for group, rank, peer, group_peer, how, resolved in updated.select(
            "group", "rank", "peer", "group_peer", "_how", "resolved_peer"
        ).iter_rows()
    ]
    return updated.with_columns(resolved_peer=pl.Series(peers, dtype=pl.Int32)).drop(
        "_row", "_candidates", "_how", *(column.meta.output_name() for column in absent)
    )
