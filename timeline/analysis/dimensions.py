"""Exposed and hidden communication per parallelism dimension, iteration and rank.

Takes an :class:`~timeline.analysis.overlap.Overlap` (its exposed/hidden communication intervals,
:attr:`~timeline.analysis.overlap.Overlap.comm`, and its iteration windows) and the communication
events the overlap measures, each with the process group it ran on
(:func:`~timeline.analysis.collectives.attributed_communication`), and gives
:data:`~timeline.analysis.schemas.DIMENSION_EXPOSURE_SCHEMA` rows.

For a key ``d`` (a dimension label, or a ``pg_desc``), a rank and an iteration window ``w``, with
``C_d`` the union of the intervals of the rank's collectives of ``d`` clipped to ``w``, and ``E``
and ``H`` the rank's exposed and hidden communication (disjoint; ``|E ∩ w|`` is the window's
``exposed_comm_ns``):

- ``comm_ns = |C_d|``, ``exposed_ns = |C_d ∩ E|``, ``hidden_ns = |C_d ∩ H|`` (so
  ``exposed_ns + hidden_ns = comm_ns``): within one dimension nothing is counted twice, however
  many of its collectives run at once;
- ``exclusive_exposed_ns = |C_d ∩ E − ⋃_{d' ≠ d} C_d'|``: the exposed time when no other key's
  collective ran.

Where collectives of two keys run at the same time on one rank, that time counts in both keys'
``comm_ns`` / ``exposed_ns`` / ``hidden_ns``: the per-key figures of a rank can add up to more than
its ``exposed_comm_ns``, never less; the ``exclusive_exposed_ns`` add up to at most it. A collective
whose group the trace does not make certain counts under :data:`AMBIGUOUS`; one whose group has no
description (or when no group is known at all) under :data:`UNDESCRIBED`: never under another key.

Everything is computed per rank from small frames (the overlap's and the communication events'), so
the rank-by-rank road (:mod:`timeline.execution.reduce`) gives the same rows as the in-memory one.
The definitions are in ``docs/metrics.md`` (Communication per dimension).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import polars as pl

from timeline.analysis.collectives import attributed_communication
from timeline.analysis.groups import group_instances
from timeline.analysis.intervals import Formula, clip_to_windows, measure, union_intervals
from timeline.analysis.overlap import Overlap
from timeline.analysis.schemas import DIMENSION_EXPOSURE_SCHEMA
from timeline.schema import PROCESS_GROUPS_SCHEMA, validate

__all__ = [
    "AMBIGUOUS",
    "UNDESCRIBED",
    "ExposureKey",
    "communication_labels",
    "compute_dimension_exposure",
    "exposure_by",
    "named_dimensions",
]

AMBIGUOUS = "ambiguous"
"""The key of collectives whose process group the trace leaves ambiguous (several could hold them)."""

UNDESCRIBED = "undescribed"
"""The key of collectives whose group has no description (``undefined``), or when no group is known."""

ExposureKey = Literal["dimension", "pg_desc"]
"""What the exposure is split by: the dimension label of the group, or its description."""

_LABELS_SCHEMA = pl.Schema(
    {
        "rank": pl.Int32(),
        "start_ns": pl.Int64(),
        "end_ns": pl.Int64(),
        "dimension": pl.String(),
        "pg_desc": pl.String(),
    }
)


def communication_labels(
    events: pl.DataFrame,
    *,
    groups: pl.DataFrame | None = None,
    overrides: Mapping[str, str] | None = None,
    clocks: pl.DataFrame | None = None,
    windows: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Return the interval, dimension and group description of each communication event the overlap measures.

    Parameters
    ----------
    events
        The canonical events frame (or the communication events of a rank-by-rank analysis).
    groups
        The process groups the traces declare (:attr:`timeline.trace.Trace.groups`).
    overrides
        Description → dimension label (``--dimension``).
    clocks
        Which ranks' times compare (:func:`~timeline.analysis.groups.shared_clocks`).
    windows
        The iteration windows (the overlap's).

    Returns
    -------
    pl.DataFrame
        ``rank``, ``start_ns``, ``end_ns``, ``dimension`` and ``pg_desc``: the group's label and
        description, :data:`AMBIGUOUS` when the group is not certain, :data:`UNDESCRIBED` when it has
        no description.
    """
    attributed = attributed_communication(
        events, groups=groups, overrides=overrides, clocks=clocks, windows=windows
    )
    declared = groups if groups is not None else PROCESS_GROUPS_SCHEMA.to_frame()
    descriptions = group_instances(events, declared, overrides=overrides).select("group", _desc="pg_desc")
    unknown = (pl.col("attributed_by") == "ambiguous") | pl.col("group").is_null()
    undescribed = pl.col("dimension").is_null()

    def label(value: pl.Expr) -> pl.Expr:
        return (
            pl.when(unknown)
            .then(pl.lit(AMBIGUOUS))
            .when(undescribed)
            .then(pl.lit(UNDESCRIBED))
            .otherwise(value)
        )

    frame = attributed.join(descriptions, on="group", how="left", maintain_order="left").select(
        "rank",
        "start_ns",
        "end_ns",
        dimension=label(pl.col("dimension").cast(pl.String)),
        pg_desc=label(pl.col("_desc").fill_null(pl.col("pg_desc").cast(pl.String))),
    )
    return validate(frame, _LABELS_SCHEMA, what="communication labels")


def exposure_by(overlap: Overlap, labels: pl.DataFrame, *, by: ExposureKey = "dimension") -> pl.DataFrame:
    """Return exposed and hidden communication per key, iteration window and rank.

    Parameters
    ----------
    overlap
        The overlap analysis (its ``comm`` intervals and ``windows``).
    labels
        :func:`communication_labels` of the same events (after the same clock alignment).
    by
        The key: ``dimension`` or ``pg_desc`` (the output's ``dimension`` column holds it).

    Returns
    -------
    pl.DataFrame
        :data:`~timeline.analysis.schemas.DIMENSION_EXPOSURE_SCHEMA`: one row per key, window and
        rank where the rank ran communication of that key in the window, sorted by key, rank and
        window start.
    """
    keyed = (
        overlap.windows.lazy()
        .sort("rank", "start_ns")
        .with_row_index("window_id")
        .select(pl.col("window_id").cast(pl.Int64), "rank", "iteration", w_start="start_ns", w_end="end_ns")
        .collect(engine="in-memory")
    )
    windows = keyed.select("rank", "window_id", "w_start", "w_end")
    pieces = union_intervals(
        labels.select("rank", _key=by, start_ns="start_ns", end_ns="end_ns"), by=["rank", "_key"]
    )
    keys = sorted(pieces.get_column("_key").unique().to_list())
    if not keys:
        return DIMENSION_EXPOSURE_SCHEMA.to_frame()
    names = {key: f"k{i}" for i, key in enumerate(keys)}
    measured = _measured_keys(pieces, overlap.comm, windows=windows, names=names)
    rows = pl.concat(
        [
            measured.lazy().select(
                "rank",
                "window_id",
                dimension=pl.lit(key),
                comm_ns=pl.col(f"{name}_comm"),
                hidden_ns=pl.col(f"{name}_hidden"),
                exposed_ns=pl.col(f"{name}_exposed"),
                exclusive_exposed_ns=pl.col(f"{name}_exclusive"),
            )
            for key, name in names.items()
        ]
    ).filter(pl.col("comm_ns") > 0)
    located = rows.join(keyed.lazy().select("window_id", "iteration", "w_start"), on="window_id", how="left")
    result = (
        located.sort("dimension", "rank", "w_start")
        .select(DIMENSION_EXPOSURE_SCHEMA.names())
        .collect(engine="in-memory")
    )
    return validate(result, DIMENSION_EXPOSURE_SCHEMA, what="exposure per dimension")


def _measured_keys(
    pieces: pl.DataFrame, comm: pl.DataFrame, *, windows: pl.DataFrame, names: Mapping[str, str]
) -> pl.DataFrame:
    """Return, per rank and window, each key's communication under the hidden and exposed states.

    ``pieces``: the union of each key's communication (``_key``); ``comm``: the overlap's
    communication intervals with their ``state``; ``names``: key → the set name it is measured as.
    """
    mine = clip_to_windows(
        pieces.with_columns(set=pl.col("_key").replace_strict(names, return_dtype=pl.String)).drop("_key"),
        windows,
        by=["rank"],
    )
    states = clip_to_windows(
        comm.select("rank", set=pl.col("state").cast(pl.String), start_ns="start_ns", end_ns="end_ns"),
        windows,
        by=["rank"],
    )
    columns = ["rank", "window_id", "set", "start_ns", "end_ns"]
    return measure(
        pl.concat([mine.select(columns), states.select(columns)]),
        by=["rank", "window_id"],
        sets=[*names.values(), "exposed", "hidden"],
        formulas=_formulas(list(names.values())),
    )


def _formulas(names: list[str]) -> dict[str, Formula]:
    """Per key set: its length, under the hidden and the exposed states, and exposed with no other key."""

    def within(name: str, state: str | None, *, alone: bool = False) -> Formula:
        def formula(s: Mapping[str, pl.Expr]) -> pl.Expr:
            expr = s[name] if state is None else s[name] & s[state]
            for other in names:
                if alone and other != name:
                    expr = expr & ~s[other]
            return expr

        return formula

    formulas: dict[str, Formula] = {}
    for name in names:
        formulas[f"{name}_comm"] = within(name, None)
        formulas[f"{name}_hidden"] = within(name, "hidden")
        formulas[f"{name}_exposed"] = within(name, "exposed")
        formulas[f"{name}_exclusive"] = within(name, "exposed", alone=True)
    return formulas


def named_dimensions(exposure: pl.DataFrame) -> list[str]:
    """Return the keys of an exposure frame that name a dimension (not ambiguous nor undescribed), sorted."""
    present = exposure.get_column("dimension").unique().to_list()
    return sorted(str(d) for d in present if d not in (AMBIGUOUS, UNDESCRIBED))


def compute_dimension_exposure(
    events: pl.DataFrame,
    overlap: Overlap,
    *,
    groups: pl.DataFrame | None = None,
    overrides: Mapping[str, str] | None = None,
    clocks: pl.DataFrame | None = None,
    by: ExposureKey = "dimension",
) -> pl.DataFrame:
    """Return exposed and hidden communication per dimension × iteration × rank of a trace.

    :func:`communication_labels` then :func:`exposure_by`.

    Parameters
    ----------
    events
        The events ``overlap`` was computed from (or their communication events).
    overlap
        Their overlap analysis.
    groups, overrides, clocks
        As for :func:`communication_labels`.
    by
        ``dimension`` or ``pg_desc``.

    Examples
    --------
    >>> from timeline import load  # doctest: +SKIP
    >>> from timeline.analysis.overlap import compute_overlap  # doctest: +SKIP
    >>> trace = load("sample_traces/fsdp2_tp_gloo")  # doctest: +SKIP
    >>> overlap = compute_overlap(trace.events)  # doctest: +SKIP
    >>> compute_dimension_exposure(trace.events, overlap, groups=trace.groups)  # doctest: +SKIP
    """
    labels = communication_labels(
        events, groups=groups, overrides=overrides, clocks=clocks, windows=overlap.windows
    )
    return exposure_by(overlap, labels, by=by)
