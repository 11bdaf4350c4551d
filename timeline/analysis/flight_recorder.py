"""What Flight Recorder dumps say about a job that stopped: who stopped, where, how, and who waits on whom.

Takes the frames of :class:`timeline.dumps.Dumps` (entries, ``pg_status``, ``pg_config`` of every
rank) and gives, with polars:

- :func:`group_progress`: per process group instance (a group name and its member ranks) and member
  rank, its progress (the last operation enqueued, started, completed) and its *state*: ``idle``
  (nothing outstanding), ``waiting`` (entered the collective the group stopped at; waits on the
  ranks that stopped), ``not_entered`` (never enqueued the collective its peers are in: its host
  did not issue it, a CPU stall, a held GIL, a data loader, an exception), ``not_completed``
  (enqueued collectives its peers completed but never completed them: its device or its network
  stopped), ``stalled`` (every rank entered, none completed: nothing in the group tells who),
  ``outstanding`` (point-to-point operations not completed), ``no_dump`` (a member with no dump);
- :func:`group_stops`: per group instance, its state and the collective it stopped at;
- :func:`find_mismatches`: collectives at one sequence number of a group that differ across its
  ranks (operation, dtypes, sizes): a desync;
- :func:`analyze_dumps`: all of it, the ranks every waiting rank waits on, and the *root* ranks:
  those that stopped in a group while waiting on no one.

Sequence numbers are what torch counts per group (``collective_seq_id``, ``p2p_seq_id`` for
point-to-point operations; see :mod:`timeline.importers.flight_recorder`). ``pg_status`` is the
rank's own view: ``last_completed`` is the last completion the rank's watchdog saw, so a rank whose
device stopped shows ``last_completed`` behind its peers' even for collectives its peers completed
with it. Every state and column is defined in ``docs/flight-recorder.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from timeline.analysis.groups import dimension_of
from timeline.schema import validate

__all__ = [
    "FLIGHT_GROUPS_SCHEMA",
    "FLIGHT_MATCHES_SCHEMA",
    "FLIGHT_MISMATCHES_SCHEMA",
    "FLIGHT_PROGRESS_SCHEMA",
    "FLIGHT_ROOTS_SCHEMA",
    "FLIGHT_WAITS_SCHEMA",
    "RANK_STATE",
    "FlightAnalysis",
    "analyze_dumps",
    "find_mismatches",
    "group_progress",
    "group_stops",
    "match_profiler_collectives",
]

RANK_STATE = pl.Enum(
    ["not_entered", "not_completed", "waiting", "stalled", "outstanding", "idle", "no_dump", "unknown"]
)
"""A rank's state in a group (module docstring; ``docs/flight-recorder.md``)."""
GROUP_STATE = pl.Enum(["stopped", "stalled", "outstanding", "idle", "unknown"])
STOP_KIND = pl.Enum(["not_entered", "not_completed", "circular_wait"])

_GROUP_COLUMNS: dict[str, pl.DataType] = {
    "group": pl.String(),
    "pg_name": pl.String(),
    "pg_desc": pl.String(),
    "dimension": pl.String(),
    "group_ranks": pl.List(pl.Int32()),
    "group_size": pl.Int32(),
    "seq_kind": pl.String(),
}

FLIGHT_PROGRESS_SCHEMA = pl.Schema(
    {
        **_GROUP_COLUMNS,
        "rank": pl.Int32(),
        "has_dump": pl.Boolean(),
        "pg_id": pl.Int64(),
        "progress_from": pl.String(),
        "last_enqueued": pl.Int64(),
        "last_started": pl.Int64(),
        "last_completed": pl.Int64(),
        "outstanding": pl.Int64(),
        "state": RANK_STATE,
        "stop_seq": pl.Int64(),
        "stop_op": pl.String(),
        "waits_on": pl.List(pl.Int32()),
    }
)
"""One row per process group instance and member rank: its progress and state."""

FLIGHT_GROUPS_SCHEMA = pl.Schema(
    {
        **_GROUP_COLUMNS,
        "state": GROUP_STATE,
        "stop_seq": pl.Int64(),
        "wait_seq": pl.Int64(),
        "stop_op": pl.String(),
        "stop_created_ns": pl.Int64(),
        "not_entered": pl.List(pl.Int32()),
        "not_completed": pl.List(pl.Int32()),
        "waiting": pl.List(pl.Int32()),
        "stalled": pl.List(pl.Int32()),
        "no_dump": pl.List(pl.Int32()),
    }
)
"""One row per process group instance: where it stopped and which ranks are in which state."""

FLIGHT_MISMATCHES_SCHEMA = pl.Schema(
    {
        "group": pl.String(),
        "pg_name": pl.String(),
        "pg_desc": pl.String(),
        "dimension": pl.String(),
        "seq": pl.Int64(),
        "field": pl.String(),
        "rank": pl.Int32(),
        "value": pl.String(),
        "expected": pl.String(),
        "agreeing": pl.Int32(),
        "ranks_compared": pl.Int32(),
    }
)
"""One row per rank whose collective at a sequence number differs from its group's (a desync)."""

FLIGHT_WAITS_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32(),
        "on_rank": pl.Int32(),
        "group": pl.String(),
        "via": pl.String(),
        "seq": pl.Int64(),
        "op": pl.String(),
    }
)
"""One row per rank and a rank it waits on: in which group, through a collective or a p2p op."""

FLIGHT_ROOTS_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32(),
        "kind": STOP_KIND,
        "groups": pl.Int32(),
        "waited_on_by": pl.Int32(),
        "stopped_at_ns": pl.Int64(),
    }
)
"""One row per root rank: a rank others wait on, stopped while waiting on no one."""

_STATUS_KEY_SCHEMA = pl.Schema({"rank": pl.Int32(), "pg_name": pl.String()})
_COMPARED = ("collective", "input_dtypes", "output_dtypes", "input_sizes", "output_sizes")
# Sizes that legitimately differ across the ranks of one collective (torch's fr_trace, Op.match):
# all_to_all splits unevenly; scatter's inputs and gather's outputs live on the root only.
_SIZES_MAY_DIFFER = {
    "input_sizes": ("all_to_all", "scatter"),
    "output_sizes": ("all_to_all", "gather"),
}


@dataclass(frozen=True)
class FlightAnalysis:
    """What the dumps of a job say (:func:`analyze_dumps`).

    Attributes
    ----------
    progress, groups, mismatches, waits, roots
        Frames of :data:`FLIGHT_PROGRESS_SCHEMA`, :data:`FLIGHT_GROUPS_SCHEMA`,
        :data:`FLIGHT_MISMATCHES_SCHEMA`, :data:`FLIGHT_WAITS_SCHEMA` and :data:`FLIGHT_ROOTS_SCHEMA`.
    headline
        The ``group`` of the instance that best shows the roots' stop, or None (see
        :func:`analyze_dumps`).
    first_stop
        The root that stopped first when every root's stop time is known, else None.
    """

    progress: pl.DataFrame
    groups: pl.DataFrame
    mismatches: pl.DataFrame
    waits: pl.DataFrame
    roots: pl.DataFrame
    headline: str | None
    first_stop: int | None


def _keyed_config(groups: pl.DataFrame) -> pl.DataFrame:
    """``pg_config`` rows with the key of their group instance: name and member ranks."""
    return groups.with_columns(
        pl.concat_str(
            pl.col("pg_name"), pl.lit("|"), pl.col("group_ranks").cast(pl.List(pl.String)).list.join(",")
        ).alias("key")
    )


def _keys(frame: pl.DataFrame, config: pl.DataFrame) -> pl.DataFrame:
    """``frame`` (rank, pg_name…) with its group instance key; ``NAME|?`` where the rank's config lacks it."""
    keyed = frame.join(config.select("rank", "pg_name", "key"), on=["rank", "pg_name"], how="left")
    return keyed.with_columns(pl.coalesce("key", pl.concat_str(pl.col("pg_name"), pl.lit("|?"))).alias("key"))


def _instances(config: pl.DataFrame, status: pl.DataFrame, entries: pl.DataFrame) -> pl.DataFrame:
    """One row per group instance: key, name, description, dimension, member ranks, kind of sequence."""
    from_config = config.select("key", "pg_name", "pg_desc", "group_ranks")
    seen = pl.concat([status.select("key", "pg_name"), entries.select("key", "pg_name")])
    unknown = seen.filter(pl.col("key").str.ends_with("|?")).unique()
    descs = entries.group_by("pg_name").agg(pl.col("pg_desc").drop_nulls().first())
    unknown = unknown.join(descs, on="pg_name", how="left").with_columns(
        pl.lit(None, dtype=pl.List(pl.Int32)).alias("group_ranks")
    )
    instances = pl.concat([from_config, unknown.select(from_config.columns)]).unique("key", keep="first")
    kinds = entries.group_by("key").agg(
        pl.when(pl.col("is_p2p").all())
        .then(pl.lit("p2p"))
        .when(~pl.col("is_p2p").any())
        .then(pl.lit("collective"))
        .otherwise(pl.lit("mixed"))
        .alias("seq_kind")
    )
    instances = instances.join(kinds, on="key", how="left").with_columns(pl.col("seq_kind").fill_null("none"))
    names = instances.group_by("pg_name").agg(pl.len().alias("_same_name"))
    instances = instances.join(names, on="pg_name").with_columns(
        pl.when(pl.col("_same_name") > 1)
        .then(
            pl.concat_str(
                pl.col("pg_name"), pl.lit("["), pl.col("key").str.split("|").list.last(), pl.lit("]")
            )
        )
        .otherwise(pl.col("pg_name"))
        .alias("group"),
        pl.col("pg_desc").map_elements(dimension_of, return_dtype=pl.String).alias("dimension"),
        pl.col("group_ranks").list.len().cast(pl.Int32).alias("group_size"),
    )
    return instances.drop("_same_name")


def _outstanding_entries(entries: pl.DataFrame) -> pl.Expr:
    """Whether an entry was not completed when the dump was written.

    NCCL marks an entry ``completed`` once its end event fired (also with timing off); an entry
    ``retired`` but not completed timed out. gloo never updates the state and retires an entry when
    its work finishes (``ProcessGroupGloo``: no events), so there ``retired`` means done.
    """
    gloo = pl.col("profiling_name").str.starts_with("gloo:").fill_null(False)
    done = (pl.col("state") == "completed").fill_null(False) | (gloo & pl.col("retired").fill_null(False))
    return ~done


def _members(
    instances: pl.DataFrame, status: pl.DataFrame, entries: pl.DataFrame, ranks: list[int]
) -> pl.DataFrame:
    """Return one row per instance and member rank with its progress: ``pg_status`` and its entries.

    ``pg_status`` gives the last operation enqueued and completed; an entry enqueued or completed
    later than it says counts too (the highest of both). Without ``pg_status``, the entries alone:
    the last enqueued, and the one before the first not completed.
    """
    listed = (
        instances.filter(pl.col("group_ranks").is_not_null())
        .select("key", pl.col("group_ranks").alias("rank"))
        .explode("rank")
    )
    seen = pl.concat([status.select("key", "rank"), entries.select("key", "rank")])
    members = pl.concat([listed, seen.filter(pl.col("key").str.ends_with("|?"))]).unique()
    from_status = status.select(
        "key",
        "rank",
        "pg_id",
        "last_enqueued",
        "last_started",
        "last_completed",
        pl.lit("pg_status").alias("_from"),
    ).unique(["key", "rank"], keep="first")
    progress = members.join(from_status, on=["key", "rank"], how="left").join(
        _entries_progress(entries), on=["key", "rank"], how="left", suffix="_e"
    )
    use_entries = pl.col("_from").is_null() & pl.col("_from_e").is_not_null()
    return progress.select(
        "key",
        pl.col("rank").cast(pl.Int32),
        pl.col("rank").is_in(ranks).alias("has_dump"),
        pl.coalesce("pg_id", "pg_id_e").alias("pg_id"),
        pl.coalesce("_from", "_from_e").alias("progress_from"),
        pl.when(use_entries)
        .then(pl.col("last_enqueued_e"))
        .otherwise(pl.max_horizontal("last_enqueued", "last_enqueued_e"))
        .alias("last_enqueued"),
        pl.when(use_entries)
        .then(pl.col("last_started_e"))
        .otherwise(pl.col("last_started"))
        .alias("last_started"),
        # pg_status keeps the last completion recorded, which gloo's worker threads may record out
        # of order and NCCL's watchdog records after the dump found it: an entry found completed
        # counts too
        pl.when(use_entries)
        .then(pl.col("last_completed_e"))
        .otherwise(pl.max_horizontal("last_completed", "_done"))
        .alias("last_completed"),
        pl.col("_open").fill_null(0).alias("_open"),
    )


def _entries_progress(entries: pl.DataFrame) -> pl.DataFrame:
    """Return each instance and rank's progress from its entries alone (see :func:`_members`).

    The last enqueued, the one before the first not completed (``_open``: how many are not; ``_done``:
    the last completed).
    """
    outstanding = entries.with_columns(_outstanding_entries(entries).alias("_out"))
    return outstanding.group_by("key", "rank").agg(
        pl.col("pg_id").first(),
        pl.col("seq").max().alias("last_enqueued"),
        pl.lit(None, dtype=pl.Int64).alias("last_started"),
        pl.coalesce(pl.col("seq").filter(pl.col("_out")).min() - 1, pl.col("seq").max()).alias(
            "last_completed"
        ),
        pl.lit("entries").alias("_from"),
        pl.col("_out").sum().alias("_open"),
        pl.col("seq").filter(~pl.col("_out")).max().alias("_done"),
    )


def _collective_states(progress: pl.DataFrame) -> pl.DataFrame:
    """Return the states of the ranks of collective groups, from their progress (module docstring)."""
    e = pl.col("last_enqueued").fill_null(0)
    c = pl.col("last_completed").fill_null(0)
    known = pl.col("progress_from").is_not_null()
    cmax = c.filter(known).max().over("key")
    emax = e.filter(known).max().over("key")
    behind = c < cmax
    state = (
        pl.when(~pl.col("has_dump"))
        .then(pl.lit("no_dump"))
        .when(~known)
        .then(pl.lit("unknown"))
        .when(behind & (e > c))
        .then(pl.lit("not_completed"))
        .when(behind | ((e == c) & (emax > cmax)))
        .then(pl.lit("not_entered"))
        .when(e > c)
        .then(pl.lit("open"))
        .otherwise(pl.lit("idle"))
    )
    frame = progress.with_columns(
        state.alias("state"), (e - c).alias("outstanding"), (c + 1).alias("stop_seq")
    )
    culprit = pl.col("state").is_in(["not_entered", "not_completed"])
    # With timing on (last_started known): where every member entered and none completed, a member
    # whose device never started the collective that its peers' devices started is the one stopped.
    is_open, began = pl.col("state") == "open", pl.col("last_started") >= pl.col("stop_seq")
    peers_began = (is_open & began.fill_null(False)).any().over("key")
    frame = frame.with_columns(
        pl.when(is_open & ~culprit.any().over("key") & peers_began & ~began.fill_null(True))
        .then(pl.lit("not_completed"))
        .otherwise(pl.col("state"))
        .alias("state")
    )
    frame = frame.with_columns(
        pl.when(pl.col("state") == "open")
        .then(pl.when(culprit.any().over("key")).then(pl.lit("waiting")).otherwise(pl.lit("stalled")))
        .otherwise(pl.col("state"))
        .alias("state")
    )
    culprits = (
        frame.filter(pl.col("state").is_in(["not_entered", "not_completed"]))
        .group_by("key")
        .agg(pl.col("rank").sort().alias("_culprits"))
    )
    frame = frame.join(culprits, on="key", how="left")
    return frame.with_columns(
        pl.when(pl.col("state") == "waiting").then(pl.col("_culprits")).alias("waits_on"),
        pl.when(pl.col("state").is_in(["idle", "no_dump", "unknown"]))
        .then(pl.lit(None, dtype=pl.Int64))
        .otherwise(pl.col("stop_seq"))
        .alias("stop_seq"),
    ).drop("_culprits")


def _peers(entries: pl.DataFrame, instances: pl.DataFrame) -> pl.DataFrame:
    """Outstanding point-to-point entries with the global rank of their peer (null when unknown)."""
    p2p = entries.filter(pl.col("is_p2p") & _outstanding_entries(entries))
    p2p = p2p.join(instances.select("key", "group_ranks"), on="key", how="left")
    local_peer = pl.when(pl.col("collective") == "send").then(pl.col("p2p_dst")).otherwise(pl.col("p2p_src"))
    return p2p.with_columns(
        pl.col("group_ranks").list.get(local_peer, null_on_oob=True).alias("peer")
    ).select("key", "rank", "seq", "profiling_name", pl.col("peer").cast(pl.Int32))


def _p2p_states(progress: pl.DataFrame, peers: pl.DataFrame) -> pl.DataFrame:
    """States of the ranks of point-to-point (and mixed) groups: outstanding operations and their peers."""
    waits = peers.group_by("key", "rank").agg(
        pl.col("peer").drop_nulls().unique().sort().alias("waits_on"), pl.col("seq").min().alias("stop_seq")
    )
    frame = progress.join(waits, on=["key", "rank"], how="left")
    state = (
        pl.when(~pl.col("has_dump"))
        .then(pl.lit("no_dump"))
        .when(pl.col("progress_from").is_null())
        .then(pl.lit("unknown"))
        .when(pl.col("stop_seq").is_not_null())
        .then(pl.lit("outstanding"))
        .otherwise(pl.lit("idle"))
    )
    return frame.with_columns(state.alias("state"), pl.col("_open").alias("outstanding"))


def _keyed(entries: pl.DataFrame, status: pl.DataFrame, groups: pl.DataFrame) -> tuple[pl.DataFrame, ...]:
    """Return the entries and status with their group instance keys, and the instances."""
    config = _keyed_config(groups)
    keyed_status = _keys(status.filter(pl.col("pg_name").is_not_null()), config)
    keyed_entries = _keys(entries.filter(pl.col("pg_name").is_not_null()), config)
    return keyed_entries, keyed_status, _instances(config, keyed_status, keyed_entries)


def _stop_ops(entries: pl.DataFrame) -> pl.DataFrame:
    """Per instance and sequence number: the operation (lowest rank's) and when it was first created."""
    return (
        entries.filter(pl.col("seq").is_not_null())
        .sort("rank")
        .group_by("key", "seq")
        .agg(
            pl.col("profiling_name").first().alias("op"), pl.col("time_created_ns").min().alias("created_ns")
        )
    )


def _progress_frame(
    entries: pl.DataFrame, status: pl.DataFrame, instances: pl.DataFrame, ranks: list[int]
) -> pl.DataFrame:
    """Every member's progress and state (the body of :func:`group_progress`), keyed."""
    members = _members(instances, status, entries, ranks).join(
        instances.select("key", "seq_kind"), on="key", how="left"
    )
    collective = _collective_states(members.filter(pl.col("seq_kind").is_in(["collective", "none"])))
    # A group no rank has entries of: comparable progress only when nothing is outstanding anywhere
    unsure = (pl.col("seq_kind") == "none") & (pl.col("state") != "idle").any().over("key")
    collective = collective.with_columns(
        pl.when(unsure & pl.col("has_dump"))
        .then(pl.lit("unknown"))
        .otherwise(pl.col("state"))
        .alias("state"),
        pl.when(unsure).then(None).otherwise(pl.col("waits_on")).alias("waits_on"),
        pl.when(unsure).then(None).otherwise(pl.col("stop_seq")).alias("stop_seq"),
    )
    p2p = _p2p_states(members.filter(pl.col("seq_kind").is_in(["p2p", "mixed"])), _peers(entries, instances))
    frame = pl.concat([collective, p2p.select(collective.columns)], how="vertical_relaxed")
    ops = _stop_ops(entries).select("key", pl.col("seq").alias("stop_seq"), pl.col("op").alias("stop_op"))
    frame = frame.join(ops, on=["key", "stop_seq"], how="left")
    return frame.join(instances.drop("seq_kind"), on="key", how="left")


def group_progress(
    entries: pl.DataFrame, status: pl.DataFrame, groups: pl.DataFrame, *, ranks: list[int]
) -> pl.DataFrame:
    """Return each group instance's members with their progress and state (:data:`FLIGHT_PROGRESS_SCHEMA`).

    Parameters
    ----------
    entries, status, groups
        The frames of :class:`timeline.dumps.Dumps`.
    ranks
        The ranks that have a dump (a member without one is ``no_dump``).
    """
    keyed_entries, keyed_status, instances = _keyed(entries, status, groups)
    frame = _progress_frame(keyed_entries, keyed_status, instances, ranks)
    frame = frame.sort("pg_name", "key", "rank")
    return validate(frame, FLIGHT_PROGRESS_SCHEMA, what="flight recorder progress")


def _ranks_in(state: str) -> pl.Expr:
    return pl.col("rank").filter(pl.col("state") == state).sort().alias(state)


def group_stops(progress: pl.DataFrame, entries: pl.DataFrame, groups: pl.DataFrame) -> pl.DataFrame:
    """Return each group instance's state and where it stopped (:data:`FLIGHT_GROUPS_SCHEMA`).

    ``state``: ``stopped`` when a member is ``not_entered`` or ``not_completed``; ``stalled`` when
    members entered and none completed; ``outstanding`` for point-to-point groups with operations
    not completed; ``idle``; ``unknown``. ``stop_seq``: the first sequence number some member did
    not complete; ``wait_seq``: the one the ``waiting`` members wait in (after the last any member
    completed); ``stop_op`` and ``stop_created_ns``: the operation at ``stop_seq`` and when the
    first rank enqueued it.

    Parameters
    ----------
    progress
        :func:`group_progress` of the dumps.
    entries, groups
        The dumps' entries and ``pg_config`` frames.
    """
    keyed_entries, _, instances = _keyed(entries, pl.DataFrame(schema=_STATUS_KEY_SCHEMA), groups)
    ops = _stop_ops(keyed_entries).join(instances.select("key", "group"), on="key").drop("key")
    states = pl.col("state")
    frame = progress.group_by(*_GROUP_COLUMNS).agg(
        pl.when(states.is_in(["not_entered", "not_completed"]).any())
        .then(pl.lit("stopped"))
        .when((states == "stalled").any())
        .then(pl.lit("stalled"))
        .when((states == "outstanding").any())
        .then(pl.lit("outstanding"))
        .when((states == "idle").any() & states.is_in(["idle", "no_dump"]).all())
        .then(pl.lit("idle"))
        .otherwise(pl.lit("unknown"))
        .alias("state"),
        pl.col("stop_seq").min().alias("stop_seq"),
        pl.col("stop_seq").filter(states == "waiting").max().alias("wait_seq"),
        *(_ranks_in(s) for s in ("not_entered", "not_completed", "waiting", "stalled", "no_dump")),
    )
    frame = frame.join(
        ops.select("group", pl.col("seq").alias("stop_seq"), pl.col("op").alias("stop_op"), "created_ns"),
        on=["group", "stop_seq"],
        how="left",
    ).rename({"created_ns": "stop_created_ns"})
    frame = frame.sort("pg_name", "group")
    return validate(frame, FLIGHT_GROUPS_SCHEMA, what="flight recorder groups")


def find_mismatches(entries: pl.DataFrame, groups: pl.DataFrame) -> pl.DataFrame:
    """Return the collectives that differ across the ranks of a group at one sequence number (a desync).

    For every group instance and collective sequence number seen on two ranks or more, each of the
    operation, the input and output dtypes and the input and output sizes is compared across the
    ranks that recorded it (sizes that legitimately differ are not: all_to_all's, scatter's inputs,
    gather's outputs). Where they differ, the value most ranks share is ``expected`` (null when
    no value is shared by more ranks than any other) and every rank with another value is a row;
    a rank is reported once per sequence number, on the first field that differs, in the order
    above. Point-to-point operations are not compared (their sizes are the pair's).
    """
    keyed, _, instances = _keyed(
        entries.filter(~pl.col("is_p2p")), pl.DataFrame(schema=_STATUS_KEY_SCHEMA), groups
    )
    values = keyed.filter(pl.col("seq").is_not_null()).select(
        "key",
        "pg_name",
        "pg_desc",
        "seq",
        "rank",
        pl.coalesce("collective", "profiling_name").alias("collective"),
        *(
            pl.col(c).cast(pl.List(pl.String)).list.join(",").alias(c)
            for c in ("input_dtypes", "output_dtypes")
        ),
        *(
            pl.col(c).list.eval(pl.element().cast(pl.List(pl.String)).list.join("x")).list.join(", ").alias(c)
            for c in ("input_sizes", "output_sizes")
        ),
    )
    values = values.with_columns(pl.len().over("key", "seq").alias("ranks_compared")).filter(
        pl.col("ranks_compared") > 1
    )
    found = [_field_mismatches(values, field) for field in _COMPARED]
    rows = pl.concat(found).sort(
        "key", "seq", "rank", pl.col("field").replace_strict(_ORDER, return_dtype=pl.Int8)
    )
    rows = rows.unique(["key", "seq", "rank"], keep="first", maintain_order=True)
    rows = rows.drop("pg_desc").join(
        instances.select("key", "group", "pg_desc", "dimension"), on="key", how="left"
    )
    return validate(rows, FLIGHT_MISMATCHES_SCHEMA, what="flight recorder mismatches")


_ORDER = {name: i for i, name in enumerate(_COMPARED)}


def _field_mismatches(values: pl.DataFrame, field: str) -> pl.DataFrame:
    """Rows of the ranks whose ``field`` differs from the value most of their group's ranks share."""
    frame = values
    if field in _SIZES_MAY_DIFFER:
        ops = _SIZES_MAY_DIFFER[field]
        # the op the most ranks recorded decides whether sizes may differ
        frame = frame.filter(~pl.col("collective").mode().first().over("key", "seq").is_in(ops))
    counts = frame.group_by("key", "seq", pl.col(field).alias("value")).agg(pl.len().alias("n"))
    top = (
        counts.sort("n", descending=True)
        .group_by("key", "seq")
        .agg(
            pl.col("value").first().alias("_top"),
            pl.col("n").first().alias("agreeing"),
            (pl.col("n") == pl.col("n").max()).sum().alias("_ties"),
            pl.len().alias("_values"),
        )
    )
    frame = frame.join(top.filter(pl.col("_values") > 1), on=["key", "seq"], how="inner")
    frame = frame.with_columns(pl.when(pl.col("_ties") == 1).then(pl.col("_top")).alias("expected"))
    frame = frame.filter(pl.col("expected").is_null() | (pl.col(field) != pl.col("expected")))
    return frame.select(
        "key",
        "pg_name",
        "pg_desc",
        "seq",
        pl.lit(field).alias("field"),
        pl.col("rank").cast(pl.Int32),
        pl.col(field).alias("value"),
        "expected",
        pl.when(pl.col("expected").is_null())
        .then(0)
        .otherwise(pl.col("agreeing"))
        .cast(pl.Int32)
        .alias("agreeing"),
        pl.col("ranks_compared").cast(pl.Int32),
    )


def _waits(progress: pl.DataFrame, peers: pl.DataFrame, instances: pl.DataFrame) -> pl.DataFrame:
    """Who waits on whom: waiting members on their group's stopped ranks, p2p operations on their peer."""
    collective = (
        progress.filter(pl.col("state") == "waiting")
        .select(
            "rank",
            pl.col("waits_on").alias("on_rank"),
            "group",
            pl.lit("collective").alias("via"),
            pl.col("stop_seq").alias("seq"),
            pl.col("stop_op").alias("op"),
        )
        .explode("on_rank")
    )
    p2p = (
        peers.filter(pl.col("peer").is_not_null())
        .join(instances.select("key", "group"), on="key")
        .sort("seq")
        .group_by("rank", "peer", "group", maintain_order=True)
        .agg(pl.col("seq").first(), pl.col("profiling_name").first().alias("op"))
        .select("rank", pl.col("peer").alias("on_rank"), "group", pl.lit("p2p").alias("via"), "seq", "op")
    )
    frame = pl.concat([collective, p2p], how="vertical_relaxed").sort("rank", "on_rank", "via", "group")
    return validate(frame, FLIGHT_WAITS_SCHEMA, what="flight recorder waits")


def _roots(progress: pl.DataFrame, waits: pl.DataFrame, entries: pl.DataFrame) -> pl.DataFrame:
    """Return the ranks that stopped in a group while waiting in none (all culprits, when all wait)."""
    culprits = progress.filter(pl.col("state").is_in(["not_entered", "not_completed"]))
    waiting = progress.filter(pl.col("state") == "waiting").get_column("rank").unique().to_list()
    roots = culprits.filter(~pl.col("rank").is_in(waiting))
    kind = (
        pl.when((pl.col("state") == "not_completed").any())
        .then(pl.lit("not_completed"))
        .otherwise(pl.lit("not_entered"))
    )
    if roots.is_empty() and not culprits.is_empty():
        roots, kind = culprits, pl.lit("circular_wait")
    frame = roots.group_by("rank").agg(kind.alias("kind"), pl.col("group").n_unique().alias("groups"))
    waited = waits.group_by("on_rank").agg(pl.col("rank").n_unique().alias("waited_on_by"))
    last = entries.group_by("rank").agg(
        pl.col("time_created_ns").max().alias("_created"),
        pl.col("time_discovered_completed_ns").max().alias("_done"),
    )
    frame = (
        frame.join(waited, left_on="rank", right_on="on_rank", how="left")
        .join(last, on="rank", how="left")
        .with_columns(
            pl.col("waited_on_by").fill_null(0),
            pl.when(pl.col("kind") == "not_entered")
            .then(pl.col("_created"))
            .when(pl.col("kind") == "not_completed")
            .then(pl.col("_done"))
            .alias("stopped_at_ns"),
        )
        .sort("rank")
    )
    return validate(frame, FLIGHT_ROOTS_SCHEMA, what="flight recorder roots")


def _headline(groups: pl.DataFrame, roots: pl.DataFrame) -> str | None:
    """Return the stopped group that shows the roots best.

    Most roots stopped in it, fewest other stopped ranks, most waiting ranks, the earliest stop
    (its collective first enqueued), then by name.
    """
    root_ranks = roots.get_column("rank").to_list()
    stopped = pl.concat_list("not_entered", "not_completed")
    ranked = (
        groups.filter(pl.col("state") == "stopped")
        .with_columns(
            stopped.list.eval(pl.element().is_in(root_ranks)).list.sum().alias("_roots"),
            stopped.list.eval(~pl.element().is_in(root_ranks)).list.sum().alias("_others"),
            pl.col("waiting").list.len().alias("_waiting"),
        )
        .filter(pl.col("_roots") > 0)
        .sort(
            ["_roots", "_others", "_waiting", "stop_created_ns", "group"],
            descending=[True, False, True, False, False],
            nulls_last=True,
        )
    )
    return None if ranked.is_empty() else str(ranked.item(0, "group"))


def analyze_dumps(
    entries: pl.DataFrame, status: pl.DataFrame, groups: pl.DataFrame, *, ranks: list[int]
) -> FlightAnalysis:
    """Return what the dumps of a job say: progress, stops, mismatches, waits, roots.

    A *root* is a rank that is ``not_entered`` or ``not_completed`` in some group and ``waiting`` in
    none: the others wait on it, it waits on no one. Its kind is ``not_completed`` when it is so in
    any group (its device stopped; its host may then stop issuing too), else ``not_entered``. When
    every such rank also waits somewhere (ranks waiting on one another, e.g. collectives issued in
    different orders in two groups) they are all roots of kind ``circular_wait``. ``stopped_at_ns``:
    for ``not_entered``, when the rank last enqueued anything (its last entry's ``time_created_ns``);
    for ``not_completed``, when it last saw a completion (``time_discovered_completed_ns``); null
    when the dump does not hold it. ``first_stop`` is the root with the earliest, when every root
    has one.

    Parameters
    ----------
    entries, status, groups
        The frames of :class:`timeline.dumps.Dumps`.
    ranks
        The ranks that have a dump.
    """
    keyed_entries, keyed_status, instances = _keyed(entries, status, groups)
    progress = validate(
        _progress_frame(keyed_entries, keyed_status, instances, ranks).sort("pg_name", "group", "rank"),
        FLIGHT_PROGRESS_SCHEMA,
        what="flight recorder progress",
    )
    stops = group_stops(progress, entries, groups)
    waits = _waits(progress, _peers(keyed_entries, instances), instances)
    roots = _roots(progress, waits, entries)
    times = roots.get_column("stopped_at_ns")
    first = None
    if not roots.is_empty() and times.null_count() == 0:
        first = int(roots.sort("stopped_at_ns", "rank").item(0, "rank"))
    return FlightAnalysis(
        progress=progress,
        groups=stops,
        mismatches=find_mismatches(entries, groups),
        waits=waits,
        roots=roots,
        headline=_headline(stops, roots),
        first_stop=first,
    )


FLIGHT_MATCHES_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32(),
        "pg_name": pl.String(),
        "seq": pl.Int64(),
        "profiling_name": pl.String(),
        "state": pl.String(),
        "time_created_ns": pl.Int64(),
        "in_bytes": pl.Int64(),
        "trace_name": pl.String(),
        "trace_collective": pl.String(),
        "start_ns": pl.Int64(),
        "end_ns": pl.Int64(),
        "trace_in_bytes": pl.Int64(),
        "same_collective": pl.Boolean(),
        "same_bytes": pl.Boolean(),
    }
)
"""One row per dump entry matched to a profiler communication event of the same rank, group and
sequence number."""


def match_profiler_collectives(events: pl.DataFrame, entries: pl.DataFrame) -> pl.DataFrame:
    """Return the dumps' collectives matched to the profiler's (:data:`FLIGHT_MATCHES_SCHEMA`).

    A dump entry and a communication event of the profiler are the same collective when they have
    the same rank, process group name (``pg_name``: the profiler's ``Process Group Name``) and
    sequence number (the profiler's ``Seq``, recorded by torch's profiler since 2026, against the
    entry's ``seq``, the number its group's ``pg_status`` counts). Where the profiler records a
    collective as several events (a CPU op and its kernel), the GPU one (with a device) is kept, else
    the first. ``same_collective`` and ``same_bytes`` say whether both name the same collective and
    the same input bytes (null when either side does not say).

    Parameters
    ----------
    events
        A trace's events (:data:`timeline.schema.EVENTS_SCHEMA`).
    entries
        The dumps' entries (:data:`timeline.importers.flight_recorder.FLIGHT_ENTRIES_SCHEMA`).
    """
    profiler = (
        events.filter(
            (pl.col("kind") == "communication")
            & pl.col("seq").is_not_null()
            & pl.col("pg_name").is_not_null()
        )
        .select(
            "rank",
            pl.col("pg_name").cast(pl.String),
            "seq",
            pl.col("name").cast(pl.String).alias("trace_name"),
            pl.col("collective").cast(pl.String).alias("trace_collective"),
            "start_ns",
            "end_ns",
            pl.col("in_bytes").alias("trace_in_bytes"),
            pl.col("device").is_null().alias("_cpu"),
        )
        .sort("_cpu", "start_ns")
        .unique(["rank", "pg_name", "seq"], keep="first", maintain_order=True)
        .drop("_cpu")
    )
    columns = ("rank", "pg_name", "seq", "profiling_name", "time_created_ns", "in_bytes", "collective")
    dumped = entries.filter(pl.col("seq").is_not_null() & pl.col("pg_name").is_not_null()).select(
        *columns, pl.col("state").cast(pl.String)
    )
    matched = dumped.join(profiler, on=["rank", "pg_name", "seq"], how="inner").with_columns(
        (pl.col("collective") == pl.col("trace_collective")).alias("same_collective"),
        (pl.col("in_bytes") == pl.col("trace_in_bytes")).alias("same_bytes"),
    )
    return validate(
        matched.sort("rank", "pg_name", "seq"), FLIGHT_MATCHES_SCHEMA, what="flight recorder matches"
    )
